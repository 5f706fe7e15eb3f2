"""``sacct --parsable2`` (``|``-separated), the format Open XDMoD ingests.

XDMoD's command (``telemetry.md`` §5)::

    TZ=UTC sacct --allusers --parsable2 --noheader --allocations --duplicates \\
      --format jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,\\
               start,end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,\\
               timelimit,nodelist,jobname

hpcscope adds ``elapsedraw,timelimitraw,admincomment`` (:data:`HPCSCOPE_FIELDS`) and reads any
field order when the output has its header line (without ``--noheader``) or ``fields=`` is
given. Times are read in both ``SLURM_TIME_FORMAT=standard`` (``2015-06-26T13:57:00``, taken
as UTC: run sacct with ``TZ=UTC``) and ``%s`` (epoch). Edge cases from the real samples:
``Unknown``/``None`` times, ``CANCELLED by <uid>``, array ids ``123_[1-3]``, het ids ``9+1``,
``Partition_Limit``/``UNLIMITED`` time limits, ``None assigned`` node lists, step lines
(``123.batch``), which are not jobs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from hpcscope.ingest.slurm.common import (
    FINISHED_STATES,
    JobRows,
    SchedulerFormatError,
    SchedulerSnapshot,
    exit_code_from_text,
    normalize_state,
    parse_job_id_text,
)
from hpcscope.ingest.slurm.gres import (
    gpus_from_tres_string,
)
from hpcscope.model.errors import SourceError
from hpcscope.model.timeutil import epoch_seconds

XDMOD_FIELDS: tuple[str, ...] = (
    "jobid",
    "jobidraw",
    "cluster",
    "partition",
    "qos",
    "account",
    "group",
    "gid",
    "user",
    "uid",
    "submit",
    "eligible",
    "start",
    "end",
    "elapsed",
    "exitcode",
    "state",
    "nnodes",
    "ncpus",
    "reqcpus",
    "reqmem",
    "reqtres",
    "alloctres",
    "timelimit",
    "nodelist",
    "jobname",
)
"""The 26 fields of XDMoD's sacct command, in its order."""

HPCSCOPE_FIELDS: tuple[str, ...] = (*XDMOD_FIELDS, "elapsedraw", "timelimitraw", "admincomment")
"""XDMoD's fields plus the raw seconds/minutes and the admin comment (jobstats summary)."""


@dataclass(frozen=True, slots=True)
class SacctRecord:
    """One job line of sacct, decoded (the fields XDMoD keeps, plus hpcscope's).

    Times are epoch seconds (UTC), None for ``Unknown``/``None``; durations in seconds.
    ``job_array_index`` is the array task id, -1 when not an array task (XDMoD's convention).
    """

    job_id: str
    job_id_raw: str
    job_array_index: int
    cluster: str | None
    partition: str | None
    qos: str | None
    account: str | None
    group: str | None
    gid: str | None
    user: str | None
    uid: str | None
    submit_time: int | None
    eligible_time: int | None
    start_time: int | None
    end_time: int | None
    elapsed_seconds: int | None
    exit_code: str
    state: str
    nnodes: str
    ncpus: str
    req_cpus: str
    req_mem: str
    req_tres: str
    alloc_tres: str
    time_limit_seconds: int | None
    node_list: str
    job_name: str
    gpus: int
    admin_comment: str | None = None


@dataclass(frozen=True, slots=True)
class SacctParse:
    """Decoded records (one per job line, in order) and the jobs snapshot built from them."""

    records: list[SacctRecord]
    snapshot: SchedulerSnapshot


_DURATION = re.compile(r"^(?:(?P<days>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)(?:\.\d+)?$")


def duration_seconds(text: str) -> int | None:
    """``3-00:00:00``, ``14:00:49``, ``05:30`` (mm:ss) -> seconds; ``UNLIMITED`` etc. -> None.

    Raises:
        ValueError: not a Slurm duration.
    """
    text = text.strip()
    if text in ("", "UNLIMITED", "Partition_Limit", "INVALID", "NONE", "None", "N/A"):
        return None
    match = _DURATION.match(text)
    if match is None:
        if text.isdigit():  # timelimitraw in minutes is handled by the caller
            return int(text)
        raise ValueError(f"bad duration {text!r}")
    days = int(match["days"] or 0)
    hours = int(match["h"] or 0)
    return ((days * 24 + hours) * 60 + int(match["m"])) * 60 + int(match["s"])


def time_epoch(text: str) -> int | None:
    """A sacct time (``standard`` ISO or ``%s`` epoch), UTC; ``Unknown``/``None`` -> None.

    Raises:
        ValueError: neither form.
    """
    text = text.strip()
    if text in ("", "Unknown", "None", "N/A", "0"):
        return None
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ValueError(f"bad time {text!r} (expected YYYY-MM-DDTHH:MM:SS or epoch)") from None
    return int(epoch_seconds(parsed))


def _header_fields(line: str) -> list[str]:
    return [name.strip().lower() for name in line.split("|")]


def parse_sacct_parsable2(
    text: str, *, source: str, fields: Sequence[str] | None = None
) -> SacctParse:
    """Read ``sacct --parsable2`` output into records and a jobs snapshot.

    Args:
        text: the command's stdout.
        source: command line or file name, named in every error and warning.
        fields: the ``--format`` field list when the output has no header (``--noheader``);
            defaults to :data:`XDMOD_FIELDS`. A header line, when present, wins.

    Returns:
        Records for job lines (step lines ``123.batch`` skipped) and the jobs table (one row
        per job, the last line winning for ``--duplicates``). Lines that cannot be read are
        skipped with a warning naming their line number.

    Raises:
        SchedulerFormatError: no line has the expected number of fields (wrong format).
    """
    lines = text.splitlines()
    warnings: list[SourceError] = []
    names = [f.lower() for f in (fields or XDMOD_FIELDS)]
    start = 0
    if lines and "jobid" in _header_fields(lines[0]):
        names = _header_fields(lines[0])
        start = 1
    if "jobid" not in names:
        raise SchedulerFormatError("the field list has no JobID", source=source, line=1)
    records: list[SacctRecord] = []
    rows = JobRows()
    by_job: dict[str, int] = {}
    read_any = False
    for number, line in enumerate(lines[start:], start + 1):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(names):
            warnings.append(
                SchedulerFormatError(
                    f"{len(values)} fields, expected {len(names)} "
                    "(truncated line, or output of another --format): skipped",
                    source=source,
                    line=number,
                )
            )
            continue
        read_any = True
        row = dict(zip(names, values, strict=True))
        try:
            record = _record(row, warnings, source, number)
        except ValueError as exc:
            warnings.append(
                SchedulerFormatError(f"line skipped: {exc}", source=source, line=number)
            )
            continue
        if record is None:
            continue
        records.append(record)
        by_job[record.job_id] = len(records) - 1
    if lines[start:] and not read_any and any(line.strip() for line in lines[start:]):
        raise SchedulerFormatError(
            f"no line has the {len(names)} fields of the expected format", source=source, line=1
        )
    for index in sorted(by_job.values()):
        _add_job(rows, records[index], source)
    return SacctParse(records=records, snapshot=rows.snapshot(warnings))


def _record(
    row: dict[str, str], warnings: list[SourceError], source: str, number: int
) -> SacctRecord | None:
    parsed = parse_job_id_text(row["jobid"])
    if parsed is None:
        raise ValueError(f"bad JobID {row['jobid']!r}")
    if parsed.step is not None:
        return None
    state_text = row.get("state", "").strip()
    state, known = normalize_state(state_text)
    if not known:
        warnings.append(
            SchedulerFormatError(
                f"unknown job state {state_text!r}: kept as written",
                source=source,
                line=number,
                field="State",
            )
        )
    exit_text = row.get("exitcode", "").strip()
    exit_code_from_text(exit_text)  # validates <return>:<signal>
    limit = row.get("timelimitraw")
    if limit is not None and limit.strip().isdigit():
        time_limit: int | None = int(limit) * 60
    else:
        time_limit = duration_seconds(row.get("timelimit", ""))
    elapsed_raw = row.get("elapsedraw")
    elapsed = (
        int(elapsed_raw)
        if elapsed_raw is not None and elapsed_raw.strip().isdigit()
        else duration_seconds(row.get("elapsed", ""))
    )
    alloc_tres = row.get("alloctres", "")
    return SacctRecord(
        job_id=parsed.job_id,
        job_id_raw=row.get("jobidraw", "").strip() or str(parsed.base),
        job_array_index=parsed.array_task if parsed.array_task is not None else -1,
        cluster=row.get("cluster") or None,
        partition=row.get("partition") or None,
        qos=row.get("qos") or None,
        account=row.get("account") or None,
        group=row.get("group") or None,
        gid=row.get("gid") or None,
        user=row.get("user") or None,
        uid=row.get("uid") or None,
        submit_time=time_epoch(row.get("submit", "")),
        eligible_time=time_epoch(row.get("eligible", "")),
        start_time=time_epoch(row.get("start", "")),
        end_time=time_epoch(row.get("end", "")),
        elapsed_seconds=elapsed,
        exit_code=exit_text,
        state=state_text if state is not None else "",
        nnodes=row.get("nnodes", ""),
        ncpus=row.get("ncpus", ""),
        req_cpus=row.get("reqcpus", ""),
        req_mem=row.get("reqmem", ""),
        req_tres=row.get("reqtres", ""),
        alloc_tres=alloc_tres,
        time_limit_seconds=time_limit,
        node_list=row.get("nodelist", ""),
        job_name=row.get("jobname", ""),
        gpus=gpus_from_tres_string(alloc_tres) or 0,
        admin_comment=row.get("admincomment") or None,
    )


def _add_job(rows: JobRows, record: SacctRecord, source: str) -> None:
    state, _ = normalize_state(record.state)
    node_list = record.node_list.strip()
    has_nodes = node_list not in ("", "None assigned", "(null)")
    started = state not in (None, "PENDING") and has_nodes
    finished = state in FINISHED_STATES
    gpus = gpus_from_tres_string(record.alloc_tres)
    if gpus is None:
        gpus = gpus_from_tres_string(record.req_tres)
    rows.add_job(
        job_id=record.job_id,
        cluster=record.cluster,
        name=record.job_name or None,
        user=record.user,
        account=record.account,
        partition=record.partition,
        qos=record.qos,
        state=state,
        exit_code=exit_code_from_text(record.exit_code) if finished else None,
        submit_time=record.submit_time,
        eligible_time=record.eligible_time,
        start_time=record.start_time if started else None,
        end_time=record.end_time if finished else None,
        time_limit_seconds=record.time_limit_seconds,
        gpus=gpus,
        nodes=node_list if has_nodes else None,
        source=source,
    )
    if record.job_id_raw and record.job_id_raw != record.job_id:
        rows.add_alias(raw_job_id=record.job_id_raw, job_id=record.job_id, cluster=record.cluster)
