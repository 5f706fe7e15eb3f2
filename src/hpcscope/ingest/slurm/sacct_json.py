"""``sacct --json`` (and slurmrestd ``/slurmdb/v0.0.3x+/jobs``), Slurm 21.08 to 24.05.

Schema drift handled (``telemetry.md`` §5): ``meta.plugin.type = openapi/dbv0.0.37`` (21.08),
``dbv0.0.38`` (22.05), ``meta.plugins.data_parser = data_parser/v0.0.39`` (23.02),
``meta.plugin.data_parser = data_parser/v0.0.40`` (23.11+); ``state.current`` a string or a list;
``time.limit`` minutes as an int or ``{set, infinite, number}``; ``array.task_id`` and
``het.job_offset`` null, int or object; ``exit_code.return_code`` int or object.

Known quirk (measured on Debian's 22.05.8, ``tests/fixtures/slurm/debian-22.05/sacct.json``):
a job whose script exited 3 is ``FAILED`` with ``exit_code {status: SUCCESS, return_code: 0}``
while ``sacct --parsable2`` prints ``3:0``. A zero exit code on a FAILED job is therefore read as
unknown (null, with a warning), never as success; another source (parsable2, slurmrestd, the
epilog's record) fills it.

sacct reports no GPU indices, so this parser yields no allocations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from hpcscope.ingest.slurm.common import (
    FINISHED_STATES,
    JobRows,
    SchedulerSnapshot,
    canonical_job_id,
    epoch_or_none,
    exit_code_from,
    load_json_document,
    normalize_state,
    slurm_int,
    string_or_none,
    time_limit_seconds,
)
from hpcscope.ingest.slurm.fields import SLURMDBD_JOB_KEYS
from hpcscope.ingest.slurm.gres import (
    gpus_from_tres_list,
)
from hpcscope.ingest.slurm.rest import _document_list, _Warnings


def parse_sacct_json(payload: bytes | str | Mapping[str, Any], *, source: str) -> SchedulerSnapshot:
    """Read ``sacct --json`` output (any generation from 21.08).

    Args:
        payload: the command's stdout, or the decoded document.
        source: the command line or file, named in errors and warnings.

    Returns:
        One job row per job (steps are not jobs), aliases of array tasks and het components,
        warnings. ``allocations`` is empty: sacct does not say which GPU indices a job held.

    Raises:
        SchedulerFormatError: not JSON (truncated: line and column given) or no ``jobs``.
    """
    doc = load_json_document(payload, source=source)
    warn = _Warnings(source)
    entries = _document_list(doc, "jobs", warn)
    rows = JobRows()
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"jobs[{index}]"
        if not isinstance(entry, Mapping):
            warn.add(f"entry is {type(entry).__name__}, not an object: skipped", field=where)
            continue
        warn.check_keys(entry, SLURMDBD_JOB_KEYS, where)
        try:
            row, raw_id = _job_row(entry, warn, where)
        except (ValueError, TypeError, KeyError) as exc:
            warn.add(f"entry skipped: {exc}", field=where)
            continue
        if row["job_id"] in seen:
            # --duplicates / requeues: the later record of the same job wins
            warn.add(
                f"job {row['job_id']} listed again (requeued?): the later record is kept",
                field=where,
            )
        seen[row["job_id"]] = index
        rows.add_job(**row)
        rows.add_alias(raw_job_id=raw_id, job_id=row["job_id"], cluster=row["cluster"])
    snapshot = rows.snapshot(warn.finish())
    if len(seen) != snapshot.jobs.num_rows:
        snapshot = _keep_last(snapshot)
    return snapshot


def _keep_last(snapshot: SchedulerSnapshot) -> SchedulerSnapshot:
    ids = snapshot.jobs.column("job_id").to_pylist()
    last = {job_id: i for i, job_id in enumerate(ids)}
    keep = sorted(last.values())
    return SchedulerSnapshot(
        jobs=snapshot.jobs.take(keep),
        allocations=snapshot.allocations,
        warnings=snapshot.warnings,
        aliases=snapshot.aliases,
    )


def _block(entry: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = entry.get(key)
    return value if isinstance(value, Mapping) else {}


class _JobRow(TypedDict):
    """One job's columns as :meth:`JobRows.add_job` takes them (times: epoch seconds)."""

    job_id: str
    cluster: str | None
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    qos: str | None
    state: str | None
    exit_code: int | None
    submit_time: int | None
    eligible_time: int | None
    start_time: int | None
    end_time: int | None
    time_limit_seconds: int | None
    gpus: int | None
    nodes: str | None
    source: str


def _job_row(job: Mapping[str, Any], warn: _Warnings, where: str) -> tuple[_JobRow, str]:
    raw_id = slurm_int(job.get("job_id"))
    if raw_id is None or raw_id <= 0:
        raise ValueError(f"no job_id ({job.get('job_id')!r})")
    array = _block(job, "array")
    het = _block(job, "het")
    array_job_id = slurm_int(array.get("job_id")) or None
    het_job_id = slurm_int(het.get("job_id")) or None
    job_id = canonical_job_id(
        raw_id,
        array_job_id=array_job_id,
        array_task_id=slurm_int(array.get("task_id")) if array_job_id else None,
        array_task_string=string_or_none(array.get("task")),
        het_job_id=het_job_id,
        het_job_offset=slurm_int(het.get("job_offset")) if het_job_id else None,
    )
    state_block = _block(job, "state")
    state, known = normalize_state(state_block.get("current"))
    if not known:
        warn.add(f"unknown job state {state!r}: kept as written", field=f"{where}.state")
    times = _block(job, "time")
    nodes = string_or_none(job.get("nodes"))
    if nodes == "None assigned":
        nodes = None
    started = state not in (None, "PENDING") and nodes is not None
    finished = state in FINISHED_STATES
    exit_code = _exit_code(job.get("exit_code")) if finished else None
    if finished and state == "FAILED" and exit_code == 0:
        warn.add(
            "FAILED job with exit code 0 (sacct --json of Slurm 22.05 reports this): "
            "exit code left unknown",
            field=f"{where}.exit_code",
        )
        exit_code = None
    tres = _block(job, "tres")
    allocated = tres.get("allocated")
    requested = tres.get("requested")
    gpus = gpus_from_tres_list(allocated) if isinstance(allocated, list) and allocated else None
    if gpus is None and isinstance(requested, list):
        gpus = gpus_from_tres_list(requested)
    association = _block(job, "association")
    cluster = string_or_none(job.get("cluster")) or string_or_none(association.get("cluster"))
    row: _JobRow = {
        "job_id": job_id,
        "cluster": cluster,
        "name": string_or_none(job.get("name")),
        "user": string_or_none(job.get("user")) or string_or_none(association.get("user")),
        "account": string_or_none(job.get("account")) or string_or_none(association.get("account")),
        "partition": string_or_none(job.get("partition")),
        "qos": string_or_none(job.get("qos")),
        "state": state,
        "exit_code": exit_code,
        "submit_time": epoch_or_none(times.get("submission")),
        "eligible_time": epoch_or_none(times.get("eligible")),
        "start_time": epoch_or_none(times.get("start")) if started else None,
        "end_time": epoch_or_none(times.get("end")) if finished else None,
        "time_limit_seconds": time_limit_seconds(times.get("limit")),
        "gpus": gpus,
        "nodes": nodes,
        "source": warn.source,
    }
    return row, str(raw_id)


def _exit_code(value: object) -> int | None:
    if not isinstance(value, Mapping):
        return None
    return_code = slurm_int(value.get("return_code"))
    signal_block = value.get("signal")
    signal = None
    if isinstance(signal_block, Mapping):
        signal = slurm_int(signal_block.get("id")) or slurm_int(signal_block.get("signal_id"))
    return exit_code_from(return_code, signal)
