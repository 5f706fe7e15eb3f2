"""``squeue`` and ``sinfo`` text output (``-O`` field lists, ``-o`` formats).

The trailing ``:`` on ``-O`` fields (``JobID:|``) makes columns variable-width with the given
separator; without it ``-O`` pads to fixed widths and truncates long names and GRES strings, so
hpcscope always asks for separated output (``telemetry.md`` §5). Fields are named by the caller
(the ``-O`` names, case-insensitive), never guessed from positions.

Node lines of ``sinfo -N`` repeat once per partition of the node; they are merged. Partition
names carry ``*`` on the default partition. GRES strings are parsed by
:func:`hpcscope.ingest.slurm.common.parse_gres` (``(null)``, ``IDX:0,3``, ``IDX:N/A``,
multi-type lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcscope.ingest.slurm.common import (
    FINISHED_STATES,
    JobRows,
    SchedulerFormatError,
    SchedulerSnapshot,
    canonical_job_id,
    normalize_state,
    parse_job_id_text,
)
from hpcscope.ingest.slurm.gres import (
    GresEntry,
    gpus_from_tres_string,
    parse_gres,
)
from hpcscope.ingest.slurm.inventory import InventorySnapshot, SlurmNode, SlurmPartition
from hpcscope.ingest.slurm.parsable import duration_seconds, time_epoch
from hpcscope.ingest.slurm.rest import _states
from hpcscope.model.errors import SourceError

SQUEUE_FIELDS: tuple[str, ...] = (
    "JobID",
    "JobArrayID",
    "HetJobID",
    "HetJobOffset",
    "Account",
    "UserName",
    "Partition",
    "QOS",
    "State",
    "SubmitTime",
    "EligibleTime",
    "StartTime",
    "TimeLimit",
    "NodeList",
    "tres-alloc",
    "Name",
)
"""hpcscope's squeue field list (Name last: a job name may contain the separator)."""

SINFO_NODE_FIELDS: tuple[str, ...] = (
    "NodeList",
    "AllocMem",
    "Memory",
    "CPUsState",
    "StateLong",
    "Partition",
    "Gres",
    "GresUsed",
)
"""``sinfo -h -N -O 'NodeList: ,AllocMem: ,Memory: ,CPUsState: ,StateLong: ,Partition: ,Gres: ,
GresUsed:'``, the exporters' node-detail command."""


def squeue_format_argument(fields: Sequence[str] = SQUEUE_FIELDS, separator: str = "|") -> str:
    """The ``-O`` argument that prints ``fields`` separated by ``separator``."""
    return ",".join(f"{name}:{separator}" for name in fields[:-1]) + f",{fields[-1]}:"


def _split(line: str, separator: str, count: int) -> list[str] | None:
    if separator == " ":
        parts = line.split()
    else:
        parts = line.split(separator, count - 1) if count else line.split(separator)
    if len(parts) == count + 1 and parts[-1] == "":
        parts = parts[:-1]
    return [part.strip() for part in parts] if len(parts) == count else None


def parse_squeue_text(
    text: str, *, source: str, fields: Sequence[str] = SQUEUE_FIELDS, separator: str = "|"
) -> SchedulerSnapshot:
    """Read ``squeue -h -O ...`` (or ``-o``) output with the given fields.

    Args:
        text: stdout of squeue (without header: ``-h``).
        source: the command, named in warnings.
        fields: the ``-O`` field names in order (``JobID`` is required).
        separator: the column separator (``|`` for ``-O 'JobID:|,...'``).

    Returns:
        Jobs (the running ones with start times; pending ones without: squeue's StartTime of a
        pending job is an estimate), raw-id aliases, warnings for unreadable lines.

    Raises:
        SchedulerFormatError: ``fields`` has no JobID, or no line matches the field count.
    """
    names = [f.lower() for f in fields]
    if "jobid" not in names and "jobarrayid" not in names:
        raise SchedulerFormatError("fields must include JobID", source=source)
    rows = JobRows()
    warnings: list[SourceError] = []
    matched = 0
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    for number, line in lines:
        parts = _split(line, separator, len(names))
        if parts is None:
            warnings.append(
                SchedulerFormatError(
                    f"expected {len(names)} fields separated by {separator!r}: line skipped",
                    source=source,
                    line=number,
                )
            )
            continue
        matched += 1
        row = dict(zip(names, parts, strict=True))
        try:
            _squeue_job(rows, row, source, warnings, number)
        except ValueError as exc:
            warnings.append(
                SchedulerFormatError(f"line skipped: {exc}", source=source, line=number)
            )
    if lines and (matched == 0 or rows.job_count == 0):
        raise SchedulerFormatError(
            f"no line could be read with the {len(names)} fields {list(fields)}"
            + (f" ({warnings[0].message})" if warnings else ""),
            source=source,
            line=lines[0][0],
        )
    return rows.snapshot(warnings)


def _na(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in ("", "N/A", "(null)", "None") else value


def _squeue_job(
    rows: JobRows, row: dict[str, str], source: str, warnings: list[SourceError], number: int
) -> None:
    raw = row.get("jobid", "")
    display = _na(row.get("jobarrayid"))
    parsed = parse_job_id_text(display or raw)
    if parsed is None:
        raise ValueError(f"bad job id {display or raw!r}")
    job_id = parsed.job_id
    het_id, het_offset = _na(row.get("hetjobid")), _na(row.get("hetjoboffset"))
    if het_id and het_offset and het_id.isdigit() and het_offset.isdigit() and het_id != "0":
        job_id = canonical_job_id(int(raw), het_job_id=int(het_id), het_job_offset=int(het_offset))
    state, known = normalize_state(row.get("state") or row.get("statecompact"))
    if not known:
        warnings.append(
            SchedulerFormatError(
                f"unknown job state {state!r}: kept as written",
                source=source,
                line=number,
                field="State",
            )
        )
    nodes = _na(row.get("nodelist"))
    started = state not in (None, "PENDING") and nodes is not None
    tres = row.get("tres-alloc", "")
    limit = _na(row.get("timelimit"))
    rows.add_job(
        job_id=job_id,
        name=_na(row.get("name")),
        user=_na(row.get("username") or row.get("user")),
        account=_na(row.get("account")),
        partition=_na(row.get("partition")),
        qos=_na(row.get("qos")),
        state=state,
        submit_time=time_epoch(row.get("submittime", "")),
        eligible_time=time_epoch(row.get("eligibletime", "")),
        start_time=time_epoch(row.get("starttime", "")) if started else None,
        end_time=None if state not in FINISHED_STATES else time_epoch(row.get("endtime", "")),
        time_limit_seconds=duration_seconds(limit) if limit else None,
        gpus=gpus_from_tres_string(tres),
        nodes=nodes,
        source=source,
    )
    if raw.isdigit() and raw != job_id:
        rows.add_alias(raw_job_id=raw, job_id=job_id, cluster=None)


def parse_sinfo_nodes_text(
    text: str, *, source: str, fields: Sequence[str] = SINFO_NODE_FIELDS, separator: str = " "
) -> InventorySnapshot:
    """Read ``sinfo -h -N -O ...`` node lines (one per node and partition), merged per node.

    Raises:
        SchedulerFormatError: ``fields`` has no NodeList, or no line matches the field count.
    """
    names = [f.lower() for f in fields]
    if "nodelist" not in names and "nodehost" not in names:
        raise SchedulerFormatError("fields must include NodeList", source=source)
    nodes: dict[str, _NodeLines] = {}
    warnings: list[SourceError] = []
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    matched = 0
    for number, line in lines:
        parts = _split(line, separator, len(names))
        if parts is None:
            warnings.append(
                SchedulerFormatError(
                    f"expected {len(names)} fields: line skipped", source=source, line=number
                )
            )
            continue
        matched += 1
        row = dict(zip(names, parts, strict=True))
        name = row.get("nodelist") or row.get("nodehost") or ""
        try:
            gres = tuple(parse_gres(row.get("gres", "")))
            gres_used = tuple(parse_gres(row.get("gresused", "")))
        except ValueError as exc:
            warnings.append(
                SchedulerFormatError(f"{exc}: GRES not read", source=source, line=number)
            )
            gres, gres_used = (), ()
        entry = nodes.get(name)
        if entry is None:
            entry = nodes[name] = _NodeLines(
                states=_states(row.get("statelong") or row.get("state") or ""),
                gres=gres,
                gres_used=gres_used,
                memory=row.get("memory", ""),
                cpus_state=row.get("cpusstate", ""),
            )
        partition = _na(row.get("partition"))
        if partition:
            entry.partitions.append(partition.rstrip("*"))
    if lines and matched == 0:
        raise SchedulerFormatError(
            f"no line has the {len(names)} expected fields", source=source, line=lines[0][0]
        )
    result = []
    for name, entry in nodes.items():
        total_cpus = entry.cpus_state.split("/")[-1] if "/" in entry.cpus_state else ""
        result.append(
            SlurmNode(
                name=name,
                states=entry.states,
                partitions=tuple(entry.partitions),
                gres=entry.gres,
                gres_used=entry.gres_used,
                cpus=int(total_cpus) if total_cpus.isdigit() else None,
                real_memory_bytes=int(entry.memory) * 1024 * 1024
                if entry.memory.isdigit()
                else None,
            )
        )
    return InventorySnapshot(nodes=tuple(result), warnings=tuple(warnings))


@dataclass(slots=True)
class _NodeLines:
    """What the lines of one node say (one line per partition)."""

    states: tuple[str, ...]
    gres: tuple[GresEntry, ...]
    gres_used: tuple[GresEntry, ...]
    memory: str
    cpus_state: str
    partitions: list[str] = field(default_factory=list)


def parse_sinfo_partitions_text(text: str, *, source: str) -> InventorySnapshot:
    """Read ``sinfo -h -o '%P|%a|%l|%D|%N'`` (partition, avail, time limit, nodes, node list).

    The default partition's ``*`` becomes ``is_default``.
    """
    partitions: list[SlurmPartition] = []
    warnings: list[SourceError] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 5:
            warnings.append(
                SchedulerFormatError(
                    "expected 5 fields (%P|%a|%l|%D|%N): line skipped", source=source, line=number
                )
            )
            continue
        name, avail, limit, count, node_list = (p.strip() for p in parts)
        try:
            max_time = duration_seconds(limit)
        except ValueError:
            max_time = None
        partitions.append(
            SlurmPartition(
                name=name.rstrip("*"),
                nodes=_na(node_list),
                state=avail.upper() or None,
                is_default=name.endswith("*"),
                max_time_seconds=max_time,
                total_nodes=int(count) if count.isdigit() else None,
            )
        )
    return InventorySnapshot(partitions=tuple(partitions), warnings=tuple(warnings))
