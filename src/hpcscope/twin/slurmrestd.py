"""slurmrestd-compatible JSON for the twin's scheduler (``GET /slurm/v0.0.40/jobs``).

The shape follows a real Slurm 23.11 response (data_parser v0.0.40): ``meta``, ``jobs[]`` with
``job_state`` as a list, times as ``{set, infinite, number}`` objects, ``tres_alloc_str``,
``gres_detail`` such as ``gpu:h100:4(IDX:0-3)``, ``exit_code.return_code``. Only the keys a
consumer of job metadata reads are filled; a real response has ~129 keys per job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from hpcscope.twin.scheduler import JobState, SimJob


class _Number(TypedDict):
    """slurmrestd's optional integer (``set`` false: no value)."""

    set: bool
    infinite: bool
    number: int


def _number(value: float | int | None) -> _Number:
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(value)}


def _index_ranges(indices: list[int]) -> str:
    """``[0,1,2,5]`` -> ``0-2,5`` as Slurm prints GRES index lists."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for value in ordered[1:]:
        if value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def _job(job: SimJob, *, cluster: str, gpu_type: str) -> dict[str, object]:
    nodes = job.nodes
    per_node: dict[str, list[int]] = {}
    for node, gpu in job.allocation:
        per_node.setdefault(node, []).append(gpu)
    gres_detail = [
        f"gpu:{gpu_type}:{len(per_node[n])}(IDX:{_index_ranges(per_node[n])})" for n in nodes
    ]
    cpus = 12 * job.gpus
    tres = (
        f"cpu={cpus},mem={job.gpus * 120}G,node={max(1, len(nodes))},billing={cpus},"
        f"gres/gpu={job.gpus},gres/gpu:{gpu_type}={job.gpus}"
    )
    eligible = job.submit_time
    return {
        "account": job.account,
        "cluster": cluster,
        "job_id": job.job_id,
        "name": job.name,
        "user_name": job.user,
        "group_name": job.account,
        "partition": job.partition,
        "qos": job.qos,
        "job_state": [job.state.value],
        "state_reason": "Resources" if job.state is JobState.PENDING else "None",
        "submit_time": _number(job.submit_time),
        "eligible_time": _number(eligible),
        "start_time": _number(job.start_time),
        "end_time": _number(
            job.end_time
            if job.end_time is not None
            else (job.start_time + job.time_limit_minutes * 60 if job.start_time else None)
        ),
        "time_limit": _number(job.time_limit_minutes),
        "exit_code": {
            "status": ["SUCCESS"] if job.exit_code == 0 else ["ERROR"],
            "return_code": _number(job.exit_code),
            "signal": {"id": _number(None), "name": ""},
        },
        "nodes": ",".join(nodes),
        "tres_alloc_str": tres if job.allocation else "",
        "tres_req_str": f"cpu={cpus},mem={job.gpus * 120}G,node=1,billing={cpus},"
        f"gres/gpu={job.gpus}",
        "tres_per_job": f"gres/gpu:{job.gpus}",
        "gres_detail": gres_detail,
        "array_job_id": _number(0),
        "array_task_id": _number(None),
        "het_job_id": _number(0),
        "het_job_offset": _number(0),
    }


def jobs_response(
    jobs: Iterable[SimJob], *, cluster: str, now: float, gpu_type: str = "h100"
) -> dict[str, object]:
    """The body of ``GET /slurm/v0.0.40/jobs`` (JSON values, v0.0.40's keys)."""
    return {
        "jobs": [
            _job(job, cluster=cluster, gpu_type=gpu_type)
            for job in sorted(jobs, key=lambda j: j.job_id)
        ],
        "last_backfill": _number(now),
        "last_update": _number(now),
        "meta": {
            "plugin": {
                "type": "openapi/slurmctld",
                "name": "Slurm OpenAPI slurmctld",
                "data_parser": "data_parser/v0.0.40",
                "accounting_storage": "accounting_storage/slurmdbd",
            },
            "client": {"source": "[127.0.0.1]:0", "user": "root", "group": "root"},
            "command": [],
            "slurm": {
                "version": {"major": "23", "micro": "1", "minor": "11"},
                "release": "23.11.1",
                "cluster": cluster,
            },
        },
        "errors": [],
        "warnings": [],
    }
