"""Per-job report: reported vs real, allocated vs useful GPU-hours, cost, and a one-line verdict.

Pure: the caller passes ``now`` (for running jobs) and the price; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from hpcscope.analysis.jobs.efficiency import (
    THROTTLE_THERMAL_MASK,
    GpuVerdict,
    JobVerdict,
)
from hpcscope.model.backends import ReadSource
from hpcscope.model.timeutil import iso_z
from hpcscope.model.xid import describe_xid


@dataclass(frozen=True, slots=True)
class GpuReport:
    """One GPU of a job, as the job page and the JSON API show it."""

    node: str
    gpu: int
    gpu_instance_id: int | None
    verdict: str
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    tensor_active_ratio: float | None
    sm_occupancy_ratio: float | None
    dram_active_ratio: float | None
    power_watts: float | None
    sm_clock_hertz: float | None
    max_temperature_celsius: float | None
    slowdown_share: float | None
    throttle_reasons: int
    xid: int | None
    observed_seconds: float
    useful_seconds: float
    energy_joules: float | None


@dataclass(frozen=True, slots=True)
class JobReport:
    """What hpcscope says about one job. Ratios are 0-1; hours are GPU-hours."""

    job_id: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    start_time: datetime | None
    end_time: datetime | None
    elapsed_seconds: float | None
    gpus_allocated: int | None
    gpus_observed: int
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    tensor_active_ratio: float | None
    allocated_gpu_hours: float | None
    observed_gpu_hours: float
    useful_gpu_hours: float
    coverage_ratio: float | None
    idle_gpus: int
    energy_joules: float | None
    cost_allocated: float | None
    cost_useful: float | None
    cost_lost: float | None
    currency: str
    verdict: str
    explanation: str
    gpus: tuple[GpuReport, ...] = field(default_factory=tuple)
    source: str = "raw"
    """Where the GPU figures come from: ``raw`` samples (running jobs, jobs not yet
    summarised) or the kept ``summary`` of a finished job (raw samples may be gone)."""
    metrics: ReadSource | None = None
    """How the metrics backend answered a ``raw`` report (None for a kept summary)."""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (datetimes as ISO 8601 UTC strings)."""
        data: dict[str, object] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = iso_z(value)
            elif isinstance(value, ReadSource):
                value = value.to_dict()
            elif name == "gpus":
                value = [{k: getattr(g, k) for k in g.__dataclass_fields__} for g in value]
            data[name] = value
        return data


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def _explain(
    verdict: JobVerdict,
    gpus: list[GpuReport],
    *,
    reported: float | None,
    real: float | None,
    state: str | None,
) -> str:
    pair = f"{_pct(reported)} reported GPU utilization, {_pct(real)} real (SM active)"
    if verdict is JobVerdict.XID_ERROR:
        bad = next(g for g in gpus if g.xid is not None)
        return (
            f"Xid {bad.xid} on {bad.node} GPU {bad.gpu} ({describe_xid(bad.xid or 0)})"
            f"{'; the job ' + state.lower() if state else ''}."
        )
    if verdict is JobVerdict.STRAGGLER:
        slow = [g for g in gpus if g.verdict == GpuVerdict.STRAGGLER.value]
        waiting = [g for g in gpus if g.verdict == GpuVerdict.WAITING_AT_BARRIER.value]
        first = slow[0]
        cause = ""
        if first.throttle_reasons & THROTTLE_THERMAL_MASK and (first.slowdown_share or 0) > 0.5:
            clock = (
                f", SM clock {first.sm_clock_hertz / 1e9:.2f} GHz" if first.sm_clock_hertz else ""
            )
            cause = f"; it is thermally throttled ({first.max_temperature_celsius:.0f} °C{clock})"
        peers = (sum(g.sm_active_ratio or 0 for g in waiting) / len(waiting)) if waiting else 0
        where = ", ".join(f"{g.node} GPU {g.gpu}" for g in slow)
        return (
            f"Straggler: {where} computes {_pct(first.sm_active_ratio)} of the time while "
            f"the other {len(waiting)} GPUs wait at the barrier ({_pct(peers)} real, "
            f"looking busy){cause}."
        )
    if verdict is JobVerdict.IDLE:
        return f"Allocated but idle: {len(gpus)} GPU(s) with {pair}."
    if verdict is JobVerdict.PARTIALLY_IDLE:
        idle = [g for g in gpus if g.verdict == GpuVerdict.IDLE.value]
        return (
            f"{len(idle)} of {len(gpus)} allocated GPUs are idle "
            f"({', '.join(f'{g.node} GPU {g.gpu}' for g in idle)}); job: {pair}."
        )
    if verdict is JobVerdict.BUSY_NOT_COMPUTING:
        return (
            f"Busy but not computing: {pair}. The GPUs mostly wait — on the input "
            "pipeline or on communication; profile a few steps with `hpcscope traces "
            "analyze` to see which phase."
        )
    if verdict is JobVerdict.LOW_EFFICIENCY:
        return f"Low efficiency: {pair}."
    if verdict is JobVerdict.HEALTHY:
        return f"Healthy: {pair}."
    return "No GPU samples collected for this job yet."


def _job_verdict(gpus: list[GpuReport]) -> JobVerdict:
    verdicts = [g.verdict for g in gpus]
    if not verdicts or all(v == GpuVerdict.NO_DATA.value for v in verdicts):
        return JobVerdict.NO_DATA
    if GpuVerdict.XID_ERROR.value in verdicts:
        return JobVerdict.XID_ERROR
    if GpuVerdict.STRAGGLER.value in verdicts:
        return JobVerdict.STRAGGLER
    if all(v == GpuVerdict.IDLE.value for v in verdicts):
        return JobVerdict.IDLE
    if GpuVerdict.IDLE.value in verdicts:
        return JobVerdict.PARTIALLY_IDLE
    busy = verdicts.count(GpuVerdict.BUSY_NOT_COMPUTING.value)
    low = verdicts.count(GpuVerdict.LOW_EFFICIENCY.value)
    if busy * 2 >= len(verdicts):
        return JobVerdict.BUSY_NOT_COMPUTING
    if (busy + low) * 2 >= len(verdicts):
        return JobVerdict.LOW_EFFICIENCY
    return JobVerdict.HEALTHY


def _weighted(gpus: list[GpuReport], attribute: str) -> float | None:
    pairs = [
        (getattr(g, attribute), g.observed_seconds)
        for g in gpus
        if getattr(g, attribute) is not None and g.observed_seconds > 0
    ]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def job_reports(
    gpu_summary: pl.DataFrame,
    jobs: pl.DataFrame,
    *,
    now: datetime,
    gpu_hour_price: float,
    currency: str,
) -> list[JobReport]:
    """Assemble :class:`JobReport` for every job in ``jobs`` (and every job seen in samples).

    Args:
        gpu_summary: output of :func:`hpcscope.analysis.jobs.efficiency.gpu_summary`.
        jobs: scheduler records (``JOB_SCHEMA`` columns); jobs absent here but present in
            samples are reported from samples alone.
        now: the end of the window for running jobs (passed in: analysis has no clock).
        gpu_hour_price: price of one allocated GPU-hour, in ``currency``.
    """
    by_job: dict[str, list[GpuReport]] = {}
    for row in (
        gpu_summary.filter(pl.col("job_id").is_not_null())
        .sort(["job_id", "node", "gpu"])
        .iter_rows(named=True)
    ):
        by_job.setdefault(row["job_id"], []).append(
            GpuReport(
                node=row["node"],
                gpu=int(row["gpu"]),
                gpu_instance_id=row["gpu_instance_id"],
                verdict=row["verdict"],
                reported_util_ratio=row["reported_util_ratio"],
                sm_active_ratio=row["sm_active_ratio"],
                tensor_active_ratio=row["tensor_active_ratio"],
                sm_occupancy_ratio=row["sm_occupancy_ratio"],
                dram_active_ratio=row["dram_active_ratio"],
                power_watts=row["power_watts"],
                sm_clock_hertz=row["sm_clock_hertz"],
                max_temperature_celsius=row["max_temperature_celsius"],
                slowdown_share=row["slowdown_share"],
                throttle_reasons=int(row["throttle_reasons"]),
                xid=row["xid"],
                observed_seconds=float(row["observed_seconds"]),
                useful_seconds=float(row["useful_seconds"]),
                energy_joules=row["energy_joules"],
            )
        )
    meta = {row["job_id"]: row for row in jobs.iter_rows(named=True)}
    reports: list[JobReport] = []
    for job_id in sorted(set(meta) | set(by_job), key=job_sort_key):
        record = meta.get(job_id, {})
        gpus = by_job.get(job_id, [])
        start, end = record.get("start_time"), record.get("end_time")
        state = record.get("state")
        elapsed = None
        if start is not None:
            stop = end if end is not None and state not in ("RUNNING", None) else now
            elapsed = max(0.0, (min(stop, now) - start).total_seconds())
        allocated_gpus = record.get("gpus")
        allocated_hours = (
            allocated_gpus * elapsed / 3600.0
            if allocated_gpus is not None and elapsed is not None
            else None
        )
        observed_hours = sum(g.observed_seconds for g in gpus) / 3600.0
        useful_hours = sum(g.useful_seconds for g in gpus) / 3600.0
        verdict = _job_verdict(gpus)
        reported = _weighted(gpus, "reported_util_ratio")
        real = _weighted(gpus, "sm_active_ratio")
        billable = allocated_hours if allocated_hours is not None else observed_hours
        energies = [g.energy_joules for g in gpus if g.energy_joules is not None]
        reports.append(
            JobReport(
                job_id=job_id,
                name=record.get("name"),
                user=record.get("user"),
                account=record.get("account"),
                partition=record.get("partition"),
                state=state,
                start_time=start,
                end_time=end,
                elapsed_seconds=elapsed,
                gpus_allocated=allocated_gpus,
                gpus_observed=len(gpus),
                reported_util_ratio=reported,
                sm_active_ratio=real,
                tensor_active_ratio=_weighted(gpus, "tensor_active_ratio"),
                allocated_gpu_hours=allocated_hours,
                observed_gpu_hours=observed_hours,
                useful_gpu_hours=useful_hours,
                coverage_ratio=(
                    min(1.0, observed_hours / allocated_hours) if allocated_hours else None
                ),
                idle_gpus=sum(1 for g in gpus if g.verdict == GpuVerdict.IDLE.value),
                energy_joules=sum(energies) if energies else None,
                cost_allocated=billable * gpu_hour_price,
                cost_useful=useful_hours * gpu_hour_price,
                cost_lost=max(0.0, billable - useful_hours) * gpu_hour_price,
                currency=currency,
                verdict=verdict.value,
                explanation=_explain(verdict, gpus, reported=reported, real=real, state=state),
                gpus=tuple(gpus),
            )
        )
    return reports


def job_sort_key(job_id: str) -> tuple[int, str]:
    """The order of :func:`job_reports`: numeric Slurm ids by number, then the others."""
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)
