"""The kept summary of a finished job: what :func:`~hpcscope.analysis.jobs.report.job_reports`
said about it, as rows to store once. Pure: the caller passes the time of summarising.

The per-GPU rows are exactly the rows of :func:`~hpcscope.analysis.jobs.efficiency.gpu_summary`
(verdicts included), so a report rebuilt from them by ``job_reports`` equals the report computed
from the raw samples. The per-job row carries the report's figures in GPU-seconds, the exit
state and its cause. Phases and the straggler verdict of profiler traces are not known here:
their columns stay null until the traces capability fills them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

import polars as pl

from hpcscope.analysis.jobs.report import JobReport

#: Columns of a kept GPU row (the output of ``gpu_summary``), in stored order.
GPU_SUMMARY_COLUMNS = (
    "job_id",
    "node",
    "gpu",
    "gpu_instance_id",
    "observed_seconds",
    "reported_util_ratio",
    "sm_active_ratio",
    "tensor_active_ratio",
    "sm_occupancy_ratio",
    "dram_active_ratio",
    "power_watts",
    "sm_clock_hertz",
    "useful_seconds",
    "energy_joules",
    "max_temperature_celsius",
    "throttle_reasons",
    "slowdown_share",
    "xid",
    "max_fb_used_bytes",
    "first_ts",
    "last_ts",
    "peer_sm_active_ratio",
    "verdict",
)


class ExitCause(StrEnum):
    """Why a job ended, in the terms of the successful-jobs SLO (issue 14)."""

    SUCCESS = "success"
    USER_ERROR = "user_error"
    NODE_FAILURE_XID = "node_failure_xid"
    NODE_FAILURE = "node_failure"
    PREEMPTION = "preemption"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


def exit_cause(state: str | None, exit_code: int | None, *, xid: int | None) -> ExitCause:
    """The cause of a job's end from its Slurm state, exit code and the Xid seen on its GPUs.

    Args:
        state: Slurm's final state (``COMPLETED``, ``FAILED``, ``NODE_FAIL`` ...).
        exit_code: the job's exit code (0 on success).
        xid: an Xid raised on one of its GPUs during the job, or None.
    """
    head = (state or "").split(" ")[0].upper()
    if head == "COMPLETED" and not exit_code:
        return ExitCause.SUCCESS
    if head in ("NODE_FAIL", "BOOT_FAIL") or (head == "FAILED" and xid is not None):
        return ExitCause.NODE_FAILURE_XID if xid is not None else ExitCause.NODE_FAILURE
    if head == "PREEMPTED":
        return ExitCause.PREEMPTION
    if head in ("TIMEOUT", "DEADLINE"):
        return ExitCause.TIMEOUT
    if head in ("CANCELLED", "REVOKED"):
        return ExitCause.CANCELLED
    if head in ("FAILED", "OUT_OF_MEMORY", "COMPLETED"):
        return ExitCause.USER_ERROR
    return ExitCause.UNKNOWN


def summary_rows(
    reports: Sequence[JobReport],
    gpu_summary: pl.DataFrame,
    jobs: pl.DataFrame,
    *,
    summarised_at: datetime,
) -> tuple[list[dict[str, object]], pl.DataFrame]:
    """The kept rows of finished jobs.

    Args:
        reports: the jobs' reports, from ``job_reports(gpu_summary, jobs, ...)``.
        gpu_summary: the ``gpu_summary`` frame the reports were built from.
        jobs: the scheduler records (for ``exit_code``).
        summarised_at: when the summary is written (passed in: no clock here).

    Returns:
        One dict per job (``JOB_SUMMARY_SCHEMA`` columns) and the GPU rows of those jobs
        (:data:`GPU_SUMMARY_COLUMNS`).
    """
    codes = {row["job_id"]: row.get("exit_code") for row in jobs.iter_rows(named=True)}
    ids = [r.job_id for r in reports]
    gpus = gpu_summary.filter(pl.col("job_id").is_in(ids)).select(GPU_SUMMARY_COLUMNS)
    rows: list[dict[str, object]] = []
    for report in reports:
        xids = [g.xid for g in report.gpus if g.xid is not None]
        firsts = gpus.filter(pl.col("job_id") == report.job_id)
        rows.append(
            {
                "job_id": report.job_id,
                "summarised_at": summarised_at,
                "user": report.user,
                "account": report.account,
                "partition": report.partition,
                "state": report.state,
                "exit_code": codes.get(report.job_id),
                "exit_cause": exit_cause(
                    report.state, codes.get(report.job_id), xid=xids[0] if xids else None
                ).value,
                "start_time": report.start_time,
                "end_time": report.end_time,
                "elapsed_seconds": report.elapsed_seconds,
                "gpus_allocated": report.gpus_allocated,
                "gpus_observed": report.gpus_observed,
                "reported_util_ratio": report.reported_util_ratio,
                "sm_active_ratio": report.sm_active_ratio,
                "tensor_active_ratio": report.tensor_active_ratio,
                "allocated_gpu_seconds": (
                    None
                    if report.allocated_gpu_hours is None
                    else report.allocated_gpu_hours * 3600.0
                ),
                "observed_gpu_seconds": sum(g.observed_seconds for g in report.gpus),
                "useful_gpu_seconds": sum(g.useful_seconds for g in report.gpus),
                "energy_joules": report.energy_joules,
                "verdict": report.verdict,
                "first_sample_ts": firsts["first_ts"].min() if firsts.height else None,
                "last_sample_ts": firsts["last_ts"].max() if firsts.height else None,
                "phases_json": None,
                "straggler_verdict": None,
            }
        )
    return rows, gpus
