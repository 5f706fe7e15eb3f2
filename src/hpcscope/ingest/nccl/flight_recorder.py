"""PyTorch NCCL flight-recorder dumps -> :class:`~hpcscope.model.collectives.FlightRecorderDump`.

PyTorch writes one dump per rank when a collective times out (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``,
``TORCH_NCCL_TRACE_BUFFER_SIZE>0``), as a pickle named ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``
(``_dump_12``). hpcscope reads the pickle through :mod:`hpcscope.ingest.nccl.safe_pickle` (never the
default unpickler) and also the JSON some tools convert it to.

Schema 2.9 (``training-steps.md`` §8): ``version``, ``pg_config{name: {name, desc, ranks}}``
(``ranks`` is a *string* such as ``"[12, 13]"``), ``nccl_version``, ``pg_status{local id:
{last_enqueued_collective, last_started_collective, last_completed_collective}}`` and
``entries[]``. Older dumps name the collective sequence ``seq_id`` and have no ``p2p_seq_id``/
``is_p2p``; newer ones may add keys: unknown keys are reported once each and read around.

The rank is the dump's ``rank`` key when present, else the digits ending the file name (as
PyTorch's ``fr_trace`` reads it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpcscope.ingest.nccl.safe_pickle import restricted_loads
from hpcscope.model.collectives import FlightRecorderDump, FrEntry, PgConfig, PgStatus
from hpcscope.model.errors import SourceError

TOP_KEYS = frozenset(
    {"version", "pg_config", "pg_status", "entries", "nccl_version", "comm_lib_version", "rank"}
)
ENTRY_KEYS = frozenset(
    {
        "record_id", "pg_id", "process_group", "thread_name", "thread_id", "collective_seq_id",
        "p2p_seq_id", "op_id", "profiling_name", "time_created_ns", "input_sizes",
        "input_dtypes", "output_sizes", "output_dtypes", "state", "time_discovered_started_ns",
        "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p", "duration_ms",
        "frames", "seq_id",
    }
)  # fmt: skip
#: Keys a dump may carry that hpcscope does not need (communicator state, stacks).
IGNORED_TOP_KEYS = frozenset({"nccl_comm_state"})
_TRAILING_DIGITS = re.compile(r"(\d+)$")
_RANK_LIST = re.compile(r"-?\d+")
_INTEGER = re.compile(r"-?[0-9]+")


class FlightRecorderError(SourceError):
    """A file that is not a readable flight-recorder dump."""


def looks_like_flight_recorder(data: bytes) -> bool:
    """True for a pickle (protocol 2+) or a JSON object with ``entries`` and ``pg_config``."""
    if data[:1] == b"\x80":
        return True
    head = data[:4096].lstrip()
    return head[:1] == b"{" and b'"entries"' in data and b'"pg_config"' in data


def rank_from_name(path: Path) -> int | None:
    """``_dump_12`` -> 12, ``..._rank12.json`` -> 12; None when the name ends in no number."""
    name = path.name
    for suffix in (".json", ".pkl", ".pickle"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    match = _TRAILING_DIGITS.search(name)
    return int(match.group(1)) if match else None


def read_flight_recorder(path: Path) -> FlightRecorderDump:
    """Read one dump file (pickle or JSON).

    Raises:
        FlightRecorderError: unreadable file, invalid JSON (with line and column), a pickle
            that holds more than plain data, or a document that is not a dump.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FlightRecorderError(f"cannot read: {exc.strerror or exc}", source=str(path)) from exc
    return parse_flight_recorder(data, source=str(path), rank=rank_from_name(path))


def parse_flight_recorder(data: bytes, *, source: str, rank: int | None) -> FlightRecorderDump:
    """Parse dump bytes; ``rank`` is used when the dump itself names none."""
    document: object
    if data[:1] == b"\x80":
        document = restricted_loads(data, source=source)
    else:
        try:
            document = json.loads(data)
        except json.JSONDecodeError as exc:
            raise FlightRecorderError(
                f"invalid JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno
            ) from exc
        except (UnicodeDecodeError, RecursionError) as exc:
            raise FlightRecorderError(f"invalid JSON: {exc}", source=source) from exc
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        raise FlightRecorderError(
            "not a flight-recorder dump: expected an object with an 'entries' list",
            source=source,
        )
    return _build(document, source=source, rank=rank)


def _build(document: Mapping[str, Any], *, source: str, rank: int | None) -> FlightRecorderDump:
    warnings: list[str] = []
    unknown = sorted(str(k) for k in document if k not in TOP_KEYS | IGNORED_TOP_KEYS)
    if unknown:
        warnings.append(f"unknown top-level keys read around: {', '.join(unknown)}")
    own_rank = document.get("rank")
    if isinstance(own_rank, int) and not isinstance(own_rank, bool):
        rank = own_rank
    configs = _configs(document.get("pg_config"), warnings)
    entries = _entries(document["entries"], warnings)
    status = _status(document.get("pg_status"), configs, entries, warnings)
    version = document.get("version")
    nccl = document.get("nccl_version", document.get("comm_lib_version"))
    return FlightRecorderDump(
        source=source,
        rank=rank,
        version=str(version) if version is not None else "unknown",
        nccl_version=str(nccl) if nccl is not None else None,
        pg_configs=configs,
        pg_status=status,
        entries=entries,
        warnings=tuple(warnings),
    )


def _configs(raw: object, warnings: list[str]) -> tuple[PgConfig, ...]:
    if not isinstance(raw, dict):
        if raw is not None:
            warnings.append("pg_config is not an object; process groups unknown")
        return ()
    configs = []
    for name, value in raw.items():
        if not isinstance(value, dict):
            warnings.append(f"pg_config.{name} is not an object; skipped")
            continue
        ranks_raw = value.get("ranks", "")
        if isinstance(ranks_raw, list | tuple):
            ranks = tuple(int(r) for r in ranks_raw if isinstance(r, int))
        else:
            ranks = tuple(int(r) for r in _RANK_LIST.findall(str(ranks_raw)))
        configs.append(
            PgConfig(
                name=str(value.get("name", name)), desc=str(value.get("desc", "")), ranks=ranks
            )
        )
    return tuple(configs)


def _entries(raw: list[Any], warnings: list[str]) -> tuple[FrEntry, ...]:
    entries: list[FrEntry] = []
    unknown: set[str] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            warnings.append(f"entries[{index}] is not an object; skipped")
            continue
        unknown.update(str(k) for k in item if k not in ENTRY_KEYS)
        try:
            entries.append(_entry(item))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            warnings.append(f"entries[{index}] skipped: {_why(exc)}")
    if unknown:
        warnings.append(f"unknown entry keys read around: {', '.join(sorted(unknown))}")
    return tuple(entries)


def _why(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)


def _entry(item: Mapping[str, Any]) -> FrEntry:
    profiling_name = str(item["profiling_name"])
    group = item.get("process_group") or (str(item.get("pg_id", "")), "")
    seq = item.get("collective_seq_id", item.get("seq_id"))
    if seq is None:
        raise KeyError("collective_seq_id")
    is_p2p = item.get("is_p2p")
    if is_p2p is None:
        is_p2p = any(word in profiling_name for word in ("send", "recv"))
    timeout_ms = item.get("timeout_ms")
    duration_ms = item.get("duration_ms")
    return FrEntry(
        record_id=int(item.get("record_id", -1)),
        pg_local_id=int(item.get("pg_id", -1)),
        pg_name=str(group[0]),
        pg_desc=str(group[1]) if len(group) > 1 else "",
        collective_seq_id=int(seq),
        p2p_seq_id=int(item.get("p2p_seq_id", 0)),
        op_id=int(item.get("op_id", -1)),
        profiling_name=profiling_name,
        is_p2p=bool(is_p2p),
        state=str(item.get("state", "unknown")),
        time_created_ns=int(item["time_created_ns"]),
        time_started_ns=_optional_int(item.get("time_discovered_started_ns")),
        time_completed_ns=_optional_int(item.get("time_discovered_completed_ns")),
        input_sizes=_shapes(item.get("input_sizes")),
        input_dtypes=tuple(str(d) for d in item.get("input_dtypes") or ()),
        output_sizes=_shapes(item.get("output_sizes")),
        output_dtypes=tuple(str(d) for d in item.get("output_dtypes") or ()),
        timeout_seconds=float(timeout_ms) / 1000.0 if timeout_ms is not None else None,
        duration_seconds=float(duration_ms) / 1000.0 if duration_ms is not None else None,
        retired=bool(item.get("retired", False)),
        thread_name=str(item.get("thread_name", "")),
    )


def _optional_int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    return int(value) if isinstance(value, int | float) else None


def _shapes(raw: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(raw, list | tuple):
        return ()
    return tuple(tuple(int(d) for d in shape) for shape in raw if isinstance(shape, list | tuple))


def _status(
    raw: object,
    configs: tuple[PgConfig, ...],
    entries: tuple[FrEntry, ...],
    warnings: list[str],
) -> tuple[PgStatus, ...]:
    """Per-group counters, each with the group's agreed name.

    The name of a local id is known from any entry of that group. Groups without entries get
    their name from creation order: PyTorch numbers groups in the order they are created, both
    the agreed names (``pg_config`` keys) and the local ids (``pg_status`` keys), so when both
    sets have the same size and the order agrees with every known pair, the i-th local id is
    the i-th name (``name_inferred``).
    """
    if not isinstance(raw, dict):
        return ()
    known = {str(e.pg_local_id): e.pg_name for e in entries}
    inferred: dict[str, str] = {}
    names = sorted((c.name for c in configs), key=_numeric_key)
    ids = sorted((str(k) for k in raw), key=_numeric_key)
    if len(names) == len(ids):
        candidate = dict(zip(ids, names, strict=True))
        if all(candidate.get(local) == name for local, name in known.items()):
            inferred = candidate
        else:
            warnings.append("pg_status ids do not follow pg_config order; unnamed groups kept")
    result = []
    for key, value in raw.items():
        if not isinstance(value, dict):
            warnings.append(f"pg_status.{key} is not an object; skipped")
            continue
        local = str(key)
        name = known.get(local) or inferred.get(local)
        try:
            counters = [
                int(value.get(field, -1))
                for field in (
                    "last_enqueued_collective",
                    "last_started_collective",
                    "last_completed_collective",
                )
            ]
        except (TypeError, ValueError):
            warnings.append(f"pg_status.{key} has counters that are not integers; skipped")
            continue
        result.append(
            PgStatus(
                local_id=local,
                name=name,
                name_inferred=local not in known and name is not None,
                last_enqueued=counters[0],
                last_started=counters[1],
                last_completed=counters[2],
            )
        )
    return tuple(result)


def _numeric_key(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if _INTEGER.fullmatch(text) else (1, text)
