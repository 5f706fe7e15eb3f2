"""PyTorch profiler (Kineto) Chrome-trace JSON -> :class:`~hpcscope.model.trace_events.RankTrace`.

Streaming, in bounded memory: the ``traceEvents`` array is read in blocks of about 1 MiB of
JSON (plain or gzip, detected by its magic bytes, whatever the file name says) by
:mod:`hpcscope.ingest.traces.json_blocks`; each block becomes numpy column chunks at once
(:mod:`hpcscope.ingest.traces.kineto_columns`), concatenated at the end. Everything outside the
array (``distributedInfo``, ``deviceProperties``...) is kept as bytes and parsed once at the end, so
key order does not matter.

Bad input: invalid JSON raises :class:`TraceError` with file, line and column; a file cut short
(truncated gzip or JSON) keeps every event read before the cut and reports the position in
:attr:`RankTrace.problems` (the analysis flags the result partial).
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import IO

import orjson

from hpcscope.ingest.compressed import open_maybe_gzip
from hpcscope.ingest.traces.json_blocks import BlockReader, read_array, reopener
from hpcscope.ingest.traces.kineto_columns import EventColumns
from hpcscope.model.bounds import BoundExceeded
from hpcscope.model.errors import SourceError
from hpcscope.model.trace_events import RankTrace

BLOCK_BYTES = 1 << 20

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: How far back of the bytes read the key is looked for again (a key cut by a block's end).
_KEY_SPAN = 1 << 20
#: Bytes read before ``traceEvents`` at most (Kineto writes it after a few KiB of metadata).
MAX_PREFIX_BYTES = 64 << 20
_RANK_IN_NAME = (
    re.compile(r"rank[-_ ]?(\d+)", re.IGNORECASE),
    re.compile(r"worker[-_ ]?(\d+)", re.IGNORECASE),
)


class TraceError(SourceError):
    """A profiler trace that cannot be read, with file and position."""


def rank_from_name(name: str) -> int | None:
    """The rank written in a trace file name (``rank-3``, ``worker3_step_12...``), if any."""
    for pattern in _RANK_IN_NAME:
        match = pattern.search(Path(name).name)
        if match:
            return int(match.group(1))
    return None


def _metadata(prefix: bytes, suffix: bytes, source: str) -> dict[str, object]:
    try:
        parsed = orjson.loads(prefix + b"[]" + suffix)
    except orjson.JSONDecodeError:
        # a truncated file has no valid suffix: read the part before the array alone
        try:
            parsed = orjson.loads(prefix + b"[]}")
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"invalid JSON around traceEvents: {exc}", source=source) from None
    if not isinstance(parsed, dict):
        raise TraceError("a Kineto trace is a JSON object", source=source, line=1, column=1)
    parsed.pop("traceEvents", None)
    return parsed


def read_kineto(
    path: str | Path,
    *,
    source: str | None = None,
    stream: IO[bytes] | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> RankTrace:
    """Parse one rank's Kineto trace (``.json`` or ``.json.gz``, any name).

    Args:
        path: the file; its name is the rank fallback when ``distributedInfo`` has none.
        source: how to name the file in errors (default: ``path``).
        stream: read from this binary stream instead of opening ``path`` (a tar member); it
            may be gzip-compressed.
        block_bytes: JSON bytes decoded per block (memory/speed trade-off).

    Returns:
        The rank's events and metadata; a truncated file yields the events before the cut
        and a message in ``problems``.

    Raises:
        TraceError: not a Kineto trace, invalid JSON (with line and column), or no rank.
    """
    path = Path(path)
    name = source or str(path)
    reopen = reopener(path, stream)  # before anything is read from ``stream``
    try:
        raw = open_maybe_gzip(path.open("rb") if stream is None else stream, source=name)
    except OSError as exc:
        raise TraceError(f"cannot open: {exc.strerror or exc}", source=name) from None
    columns = EventColumns()
    reader = BlockReader(raw, name, block_bytes, reopen, array="traceEvents", error_type=TraceError)
    try:
        searched = 0  # where the key may start that was not searched yet: linear in the prefix
        while (match := _KEY.search(reader.buf, searched)) is None:
            searched = max(0, len(reader.buf) - _KEY_SPAN)
            if len(reader.buf) > MAX_PREFIX_BYTES:
                raise TraceError(
                    f"not a Kineto trace: no traceEvents array in the first {MAX_PREFIX_BYTES:,} "
                    "bytes",
                    source=name,
                )
            if not reader.more():
                text = reader.buf.lstrip()
                if reader.problem:
                    raise TraceError(reader.problem, source=name)
                if not text:
                    raise TraceError("empty file", source=name, line=1, column=1)
                if text[:1] != b"{":
                    raise reader.error("not a Kineto trace: expected a JSON object", 0)
                raise TraceError("not a Kineto trace: no traceEvents array", source=name)
        prefix = bytes(reader.buf[: match.end() - 1])
        reader.drop(match.end() - 1)  # keep the '[' as the slack byte
        parts = [read_array(reader, columns)]
        if not reader.eof:
            while block := raw.read(block_bytes):
                parts.append(block)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"compressed stream broken: {exc}", source=name) from None
    except RecursionError:  # msgspec's answer to events nested past the interpreter's stack
        raise BoundExceeded(
            "events nested too deeply to read: refused", bound="depth", source=name
        ) from None
    finally:
        raw.close()
    suffix = b"".join(parts) if reader.problem is None else b"}"
    return _rank_trace(name, _metadata(prefix, suffix, name), columns, reader)


def _rank_trace(
    name: str, metadata: dict[str, object], columns: EventColumns, reader: BlockReader
) -> RankTrace:
    info = metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank = info.get("rank")
    rank_from = "distributedInfo"
    if not isinstance(rank, int):
        rank = rank_from_name(name)
        rank_from = "file name"
    if rank is None:
        raise TraceError(
            "cannot tell which rank this trace is: no distributedInfo.rank and no rank "
            "number in the file name (rank-N, workerN)",
            source=name,
        )
    world = info.get("world_size")
    backend = info.get("backend")
    devices = metadata.get("deviceProperties")
    device = None
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        device = str(devices[0].get("name")) if devices[0].get("name") else None
    problems = []
    if reader.problem:
        problems.append(reader.problem)
    if columns.skipped:
        problems.append(f"{columns.skipped} events with unusable fields were skipped")
    return RankTrace(
        source=name,
        rank=rank,
        rank_from=rank_from,
        world_size=world if isinstance(world, int) else None,
        backend=backend if isinstance(backend, str) else None,
        events=columns.table(),
        problems=tuple(problems),
        bytes_read=reader.offset + len(reader.buf),
        device=device,
        gpu_index=max(columns.devices, key=lambda d: columns.devices[d])
        if columns.devices
        else None,
        metadata={
            k: v
            for k, v in metadata.items()
            if k in ("distributedInfo", "schemaVersion", "host_name", "baseTimeNanoseconds")
        },
    )
