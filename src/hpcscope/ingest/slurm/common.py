"""What every Slurm parser shares: job ids, states, numbers and times, JSON documents, the
snapshot and its table builder (TRES/GRES strings: :mod:`hpcscope.ingest.slurm.gres`).

Job ids (see ``docs/golden-path.md``): a plain job is its number (``"12345"``); an array task is
``"<array_job_id>_<task_id>"`` (``"7725337_411"``), the pending rest of an array
``"<array_job_id>_[<task_string>]"``; a heterogeneous job component ``"<het_job_id>+<offset>"``
(``"900+1"``). These are the ids ``squeue`` and ``sacct`` print. The raw numeric id Slurm gives
each array task or het component is kept in the ``aliases`` table (raw -> canonical), so a raw
id written by an older prolog, typed by a user or found in a log resolves to the same job.

Slurm's JSON changed shape across generations (``telemetry.md`` §5): numbers become
``{set, infinite, number}`` objects, states become lists. The helpers here accept every shape;
parsers pick fields by name, never by position.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import JOB_ALIAS_SCHEMA, JOB_ALLOCATION_SCHEMA, JOB_SCHEMA


class SchedulerFormatError(SourceError):
    """Scheduler output (sacct, squeue, sinfo, sacctmgr, slurmrestd) that cannot be read."""


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """What one scheduler document says about jobs.

    Attributes:
        jobs: one row per job, :data:`~hpcscope.model.schemas.JOB_SCHEMA`.
        allocations: one row per GPU (or MIG instance) a job held on a node,
            :data:`~hpcscope.model.schemas.JOB_ALLOCATION_SCHEMA`. ``end_time`` is null while
            the job runs.
        warnings: entries skipped or fields not understood; the rest of the document was read.
        aliases: raw Slurm job id -> canonical id, for array tasks and het components,
            :data:`~hpcscope.model.schemas.JOB_ALIAS_SCHEMA`.
    """

    jobs: pa.Table
    allocations: pa.Table
    warnings: list[SourceError]
    aliases: pa.Table = field(default_factory=lambda: JOB_ALIAS_SCHEMA.empty_table())


# --------------------------------------------------------------------------- job ids

_JOB_ID_TEXT = re.compile(
    r"^(?P<base>\d+)"
    r"(?:_(?P<task>\d+)|_\[(?P<tasks>[^\]]*)\]|\+(?P<offset>\d+))?"
    r"(?:\.(?P<step>[A-Za-z0-9_+-]+))?$"
)


@dataclass(frozen=True, slots=True)
class JobIdText:
    """A job id as Slurm prints it, split into its parts.

    Attributes:
        job_id: the canonical job id (no step suffix).
        base: the leading number (array job id, het job id, or the job id).
        array_task: the task id of an array task.
        array_tasks: the task list of a pending array remainder (``"1-3"``).
        het_offset: the component offset of a het job.
        step: the step suffix (``"batch"``, ``"extern"``, ``"0"``), or None for the job itself.
    """

    job_id: str
    base: int
    array_task: int | None = None
    array_tasks: str | None = None
    het_offset: int | None = None
    step: str | None = None


def parse_job_id_text(text: str) -> JobIdText | None:
    """Split ``"123"``, ``"123_4"``, ``"123_[1-3]"``, ``"123+1"``, ``"123_4.batch"``.

    Returns:
        The parts, or None when ``text`` is not a Slurm job id.
    """
    match = _JOB_ID_TEXT.match(text.strip())
    if match is None:
        return None
    base = int(match["base"])
    task = int(match["task"]) if match["task"] is not None else None
    offset = int(match["offset"]) if match["offset"] is not None else None
    tasks = match["tasks"]
    job_id = canonical_job_id(
        base,
        array_job_id=base if (task is not None or tasks is not None) else None,
        array_task_id=task,
        array_task_string=tasks,
        het_job_id=base if offset is not None else None,
        het_job_offset=offset,
    )
    return JobIdText(job_id, base, task, tasks, offset, match["step"])


def canonical_job_id(
    job_id: int,
    *,
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    array_task_string: str | None = None,
    het_job_id: int | None = None,
    het_job_offset: int | None = None,
) -> str:
    """hpcscope's id for a job, the one ``squeue``/``sacct`` print.

    Args:
        job_id: Slurm's raw numeric id of this record.
        array_job_id: the array's id, 0 or None when not an array job.
        array_task_id: this task's index, None for the pending remainder of an array.
        array_task_string: the remainder's task list (``"412-9999"``).
        het_job_id: the het job's id, 0 or None when not heterogeneous.
        het_job_offset: this component's offset.
    """
    if het_job_id and het_job_offset is not None:
        return f"{het_job_id}+{het_job_offset}"
    if array_job_id:
        if array_task_id is not None:
            return f"{array_job_id}_{array_task_id}"
        if array_task_string:
            return f"{array_job_id}_[{array_task_string}]"
    return str(job_id)


# --------------------------------------------------------------------------- states

#: Slurm's base job states (``squeue --help``, ``sacct -s``). Anything else is kept and warned.
BASE_JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REQUEUED",
        "RESIZING",
        "REVOKED",
        "SPECIAL_EXIT",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
    }
)
"""Base states and the state flags sacct reports as a whole state (REQUEUED, REVOKED...)."""

#: States after which a job holds no resources: its recorded end time is real.
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)

_SHORT_STATES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "OOM": "OUT_OF_MEMORY",
    "CG": "RUNNING",  # COMPLETING: still holds its nodes
    "CF": "PENDING",  # CONFIGURING: allocated, nodes booting
    "RQ": "REQUEUED",
    "RH": "REQUEUE_HOLD",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "SE": "SPECIAL_EXIT",
}


def normalize_state(raw: object) -> tuple[str | None, bool]:
    """Reduce any Slurm state spelling to one base state.

    Accepts ``"RUNNING"``, ``["RUNNING", "COMPLETING"]`` (23.11+ lists: the first base state
    wins, flags are dropped), ``"CANCELLED by 1234"`` (sacct), ``"CD"`` (squeue ``%t``).

    Returns:
        ``(state, known)``: the upper-case state (None when empty) and whether it is a state
        Slurm documents. Unknown states are returned as written so a newer Slurm's states are
        not lost; callers warn.
    """
    if isinstance(raw, list):
        names = [str(item).strip().upper() for item in raw if str(item).strip()]
        for name in names:
            if name in BASE_JOB_STATES:
                return name, True
        return (names[0], False) if names else (None, True)
    if raw is None:
        return None, True
    text = str(raw).strip()
    if not text:
        return None, True
    word = text.split()[0].upper().rstrip("+")
    if word in BASE_JOB_STATES:
        return word, True
    if word in _SHORT_STATES:
        return _SHORT_STATES[word], True
    if word == "COMPLETING":
        return "RUNNING", True
    if word == "CONFIGURING":
        return "PENDING", True
    return word, False


# --------------------------------------------------------------------------- numbers and times


def slurm_number(value: object) -> int | float | None:
    """Read a Slurm number in any generation's shape.

    ``12`` -> 12; ``{"set": true, "infinite": false, "number": 12}`` -> 12;
    ``{"set": false, ...}`` and ``{"infinite": true, ...}`` -> None; None -> None.

    Raises:
        ValueError: the value is neither a number nor such an object.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        return value
    if isinstance(value, Mapping):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        number = value.get("number")
        if number is None:
            return None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError(f"expected a number in {dict(value)!r}")
        return number
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    raise ValueError(f"expected a number, got {value!r}")


def slurm_int(value: object) -> int | None:
    """:func:`slurm_number` as an int (floats truncated).

    Raises:
        ValueError: as :func:`slurm_number`, and for a float that is not finite (``Infinity``
            and ``NaN`` parse as JSON numbers; Slurm writes an infinite limit as an object).
    """
    number = slurm_number(value)
    if number is None:
        return None
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {number!r}")
    return int(number)


#: 9999-12-31T23:59:59Z, the last second a timestamp column (and ``datetime``) holds.
LAST_EPOCH_SECONDS = 253_402_300_799


def epoch_or_none(value: object) -> int | None:
    """A Slurm epoch time: 0 and unset mean "not happened", which we store as null.

    Raises:
        ValueError: as :func:`slurm_int`, and for a time after year 9999 (no timestamp holds it).
    """
    number = slurm_int(value)
    if number is None or number <= 0:
        return None
    if number > LAST_EPOCH_SECONDS:
        raise ValueError(f"expected an epoch time, got {number!r} (after year 9999)")
    return number


def time_limit_seconds(value: object) -> int | None:
    """A Slurm time limit in minutes (int or object), in seconds; infinite/unset -> None."""
    minutes = slurm_int(value)
    if minutes is None or minutes < 0:
        return None
    # Slurm's NO_VAL / INFINITE sentinels printed as plain ints by older plugins
    if minutes >= 0xFFFFFFFE:
        return None
    return minutes * 60


def exit_code_from(return_code: int | None, signal: int | None) -> int | None:
    """One exit code as a shell reports it: the return code, or 128 + signal when signalled."""
    if signal:
        return 128 + signal
    return return_code


def exit_code_from_wait_status(status: int | None) -> int | None:
    """Decode a raw wait status (slurmctld's ``exit_code``: ``return << 8 | signal``)."""
    if status is None or status < 0:
        return None
    if status >= 0xFFFFFFFE:
        return None
    return exit_code_from((status >> 8) & 0xFF, status & 0x7F)


def exit_code_from_text(text: str) -> int | None:
    """sacct's ``ExitCode`` ``"<return>:<signal>"``."""
    text = text.strip()
    if not text:
        return None
    code, _, sig = text.partition(":")
    if not code.strip().isdigit() or (sig and not sig.strip().isdigit()):
        raise ValueError(f"bad exit code {text!r} (expected <return>:<signal>)")
    return exit_code_from(int(code), int(sig) if sig else None)


# --------------------------------------------------------------------------- JSON documents


def load_json_document(
    payload: bytes | str | Mapping[str, Any], *, source: str
) -> Mapping[str, Any]:
    """Decode a JSON document, or raise :class:`SchedulerFormatError` with line and column.

    A truncated or malformed document is an error for the whole document: nothing of it is
    used, so nothing stored from earlier documents is replaced by a partial read.
    """
    if isinstance(payload, Mapping):
        return payload
    text = payload.decode("utf-8", errors="replace") if isinstance(payload, bytes) else payload
    if not text.strip():
        raise SchedulerFormatError("empty document (expected a JSON object)", source=source)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchedulerFormatError(
            f"not valid JSON ({exc.msg}); the document may be truncated",
            source=source,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except RecursionError:
        raise SchedulerFormatError("JSON nested too deeply", source=source) from None
    if not isinstance(document, dict):
        raise SchedulerFormatError(
            f"expected a JSON object, got {type(document).__name__}", source=source, line=1
        )
    return document


def data_parser_version(meta: object) -> str | None:
    """The plugin generation named in a document's ``meta``: ``"v0.0.40"``, ``"dbv0.0.37"``.

    21.08/22.05 write ``meta.plugin.type = "openapi/dbv0.0.37"``; 23.02 writes
    ``meta.plugins.data_parser``; 23.11+ ``meta.plugin.data_parser``.
    """
    if not isinstance(meta, Mapping):
        return None
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if isinstance(plugin, Mapping):
            for field_name in ("data_parser", "type"):
                value = plugin.get(field_name)
                if isinstance(value, str) and "/" in value:
                    version = value.rsplit("/", 1)[1]
                    if re.fullmatch(r"(db)?v\d+\.\d+\.\d+", version):
                        return version
    return None


def slurm_release(meta: object) -> str | None:
    """``meta.slurm.release`` (23.11+) or ``meta.Slurm.release`` (older)."""
    if not isinstance(meta, Mapping):
        return None
    for key in ("slurm", "Slurm"):
        block = meta.get(key)
        if isinstance(block, Mapping) and isinstance(block.get("release"), str):
            return str(block["release"])
    return None


def string_or_none(value: object) -> str | None:
    """A string field: empty, ``(null)`` and non-strings become None."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        return text if text and text != "(null)" else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


# --------------------------------------------------------------------------- table builders


class JobRows:
    """Accumulates job, allocation and alias rows, then builds the Arrow tables."""

    def __init__(self) -> None:
        self._jobs: dict[str, list[Any]] = {f.name: [] for f in JOB_SCHEMA}
        self._allocs: dict[str, list[Any]] = {f.name: [] for f in JOB_ALLOCATION_SCHEMA}
        self._aliases: dict[str, list[Any]] = {f.name: [] for f in JOB_ALIAS_SCHEMA}
        self._seen_aliases: set[tuple[str, str]] = set()

    def add_job(self, **row: Any) -> None:
        """Add one job; missing columns are null; times are epoch seconds."""
        unknown = set(row) - set(self._jobs)
        if unknown:
            raise KeyError(f"not job columns: {sorted(unknown)}")
        for name, column in self._jobs.items():
            value = row.get(name)
            if name.endswith("_time") and value is not None:
                value = int(value) * 1_000_000
            column.append(value)

    def add_allocation(
        self,
        *,
        job_id: str,
        node: str,
        gpu: int,
        gpu_instance_id: int | None,
        start_time: int,
        end_time: int | None,
    ) -> None:
        """Add one GPU held by a job on a node (times in epoch seconds)."""
        self._allocs["job_id"].append(job_id)
        self._allocs["node"].append(node)
        self._allocs["gpu"].append(gpu)
        self._allocs["gpu_instance_id"].append(gpu_instance_id)
        self._allocs["start_time"].append(start_time * 1_000_000)
        self._allocs["end_time"].append(None if end_time is None else end_time * 1_000_000)

    def add_alias(self, *, raw_job_id: str, job_id: str, cluster: str | None) -> None:
        """Record that Slurm's raw id ``raw_job_id`` is the job ``job_id``."""
        if raw_job_id == job_id or (raw_job_id, job_id) in self._seen_aliases:
            return
        self._seen_aliases.add((raw_job_id, job_id))
        self._aliases["raw_job_id"].append(raw_job_id)
        self._aliases["job_id"].append(job_id)
        self._aliases["cluster"].append(cluster)

    @property
    def job_count(self) -> int:
        return len(self._jobs["job_id"])

    def snapshot(self, warnings: list[SourceError]) -> SchedulerSnapshot:
        """The tables built so far, with ``warnings``."""
        return SchedulerSnapshot(
            jobs=pa.table(self._jobs, schema=JOB_SCHEMA),
            allocations=pa.table(self._allocs, schema=JOB_ALLOCATION_SCHEMA),
            warnings=warnings,
            aliases=pa.table(self._aliases, schema=JOB_ALIAS_SCHEMA),
        )
