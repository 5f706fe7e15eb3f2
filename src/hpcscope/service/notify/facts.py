"""Build the notes' and rules' :class:`~hpcscope.analysis.notify.facts.JobFacts` from the store.

Job-level figures come from the job report (:mod:`hpcscope.service.jobs.reports`, scoped by
the principal), per-GPU memory peaks and peers from the same GPU summary the report is built
on, each GPU's memory from the topology, and the recent minutes from the 1-minute rollups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from hpcscope.analysis.jobs.efficiency import THROTTLE_THERMAL_MASK
from hpcscope.analysis.jobs.report import JobReport
from hpcscope.analysis.notify.facts import GpuFacts, GpuMinute, JobFacts
from hpcscope.model.topology import Topology
from hpcscope.service.core import Service
from hpcscope.service.jobs import reports
from hpcscope.store import summaries as kept


def _gpu_memory(topology: Topology) -> dict[tuple[str, int], float]:
    return {(g.node, g.index): float(g.model.memory_bytes) for g in topology.gpus}


def facts_of(
    service: Service,
    found: Sequence[JobReport],
    *,
    minutes: dict[str, list[GpuMinute]] | None = None,
) -> list[JobFacts]:
    """The facts of already scoped reports (the caller checked visibility)."""
    if not found:
        return []
    ids = sorted({r.job_id for r in found})
    summarised = kept.summarised_job_ids(service.store, ids)
    frame = reports.gpu_frame(
        service.store,
        sorted(set(ids) - summarised),
        summarised=sorted(summarised),
        scrape_interval_seconds=service.settings.scrape_interval_seconds,
        samples=service.gpu_samples(),
    )
    extra: dict[tuple[str, str, int], dict[str, object]] = {}
    for row in frame.iter_rows(named=True):
        if row["job_id"] is not None:
            extra[(row["job_id"], row["node"], int(row["gpu"]))] = row
    memory = _gpu_memory(service.topology)
    result = []
    for report in found:
        gpus = []
        for g in report.gpus:
            row = extra.get((report.job_id, g.node, g.gpu), {})
            peak = row.get("max_fb_used_bytes")
            peer = row.get("peer_sm_active_ratio")
            gpus.append(
                GpuFacts(
                    node=g.node,
                    gpu=g.gpu,
                    verdict=g.verdict,
                    sm_active_ratio=g.sm_active_ratio,
                    reported_util_ratio=g.reported_util_ratio,
                    peer_sm_active_ratio=None if peer is None else float(peer),  # type: ignore[arg-type]
                    max_temperature_celsius=g.max_temperature_celsius,
                    thermal_throttled=bool(g.throttle_reasons & THROTTLE_THERMAL_MASK)
                    and (g.slowdown_share or 0.0) > 0.5,
                    xid=g.xid,
                    max_fb_used_bytes=None if peak is None else float(peak),  # type: ignore[arg-type]
                    fb_total_bytes=memory.get((g.node, g.gpu)),
                )
            )
        result.append(
            JobFacts(
                job_id=report.job_id,
                user=report.user,
                account=report.account,
                state=report.state,
                elapsed_seconds=report.elapsed_seconds,
                gpus_allocated=report.gpus_allocated,
                sm_active_ratio=report.sm_active_ratio,
                reported_util_ratio=report.reported_util_ratio,
                gpus=tuple(gpus),
                partition=report.partition,
                start_time=report.start_time,
                minutes=tuple((minutes or {}).get(report.job_id, ())),
            )
        )
    return result


def running_minutes(
    service: Service, job_ids: Sequence[str], *, since: datetime, until: datetime
) -> list[dict[str, object]]:
    """The 1-minute means since ``since`` of the GPUs of ``job_ids`` (the running jobs), as
    the metrics backend answers them: ``job_id``, ``minute``, ``node``, ``gpu``,
    ``sm_active_ratio``, ``reported_util_ratio``."""
    if not job_ids:
        return []
    read = service.gpu_samples().gpu_timeseries(
        job_ids, bucket_seconds=60, since=since, until=until
    )
    return [
        {
            "job_id": row["job_id"],
            "minute": row["bucket"],
            "node": row["node"],
            "gpu": int(row["gpu"]),
            "sm_active_ratio": row["sm_active_ratio"],
            "reported_util_ratio": row["reported_util_ratio"],
        }
        for row in read.table.to_pylist()
        if row["job_id"] is not None and row["bucket"] >= since
    ]


def minutes_by_job(rows: Sequence[dict[str, object]]) -> dict[str, list[GpuMinute]]:
    """Group :func:`running_minutes` rows by job."""
    grouped: dict[str, list[GpuMinute]] = defaultdict(list)
    for row in rows:
        sm, util = row["sm_active_ratio"], row["reported_util_ratio"]
        grouped[str(row["job_id"])].append(
            GpuMinute(
                minute=row["minute"],  # type: ignore[arg-type]
                node=str(row["node"]),
                gpu=int(row["gpu"]),  # type: ignore[call-overload]
                sm_active_ratio=None if sm is None else float(sm),  # type: ignore[arg-type]
                reported_util_ratio=None if util is None else float(util),  # type: ignore[arg-type]
            )
        )
    return grouped


def reports_at(service: Service, job_ids: Sequence[str], *, now: datetime) -> list[JobReport]:
    """Reports of ``job_ids`` for hpcscope's own evaluation (every job: admin scope)."""
    from hpcscope.model.access import system_principal

    if not job_ids:
        return []
    return reports.reports_for(
        service.store,
        system_principal("notify"),
        job_ids=list(job_ids),
        now=now,
        scrape_interval_seconds=service.settings.scrape_interval_seconds,
        gpu_hour_price=service.topology.gpu_hour_price,
        currency=service.topology.currency,
        samples=service.gpu_samples(),
    )


def light_facts(
    records: Sequence[dict[str, object]],
    minutes: dict[str, list[GpuMinute]],
    *,
    now: datetime,
) -> list[JobFacts]:
    """Facts from the scheduler's record and the recent minutes only (no per-GPU summary):
    what the minute-based rules and warn-then-cancel need."""
    result = []
    for row in records:
        start = row.get("start_time")
        end = row.get("end_time")
        state = row.get("state")
        stop = end if isinstance(end, datetime) and state != "RUNNING" else now
        elapsed = (
            max(0.0, (min(stop, now) - start).total_seconds())
            if isinstance(start, datetime)
            else None
        )
        gpus = row.get("gpus")
        job_id = str(row["job_id"])
        result.append(
            JobFacts(
                job_id=job_id,
                user=None if row.get("user") is None else str(row["user"]),
                account=None if row.get("account") is None else str(row["account"]),
                state=None if state is None else str(state).split()[0],
                elapsed_seconds=elapsed,
                gpus_allocated=None if gpus is None else int(gpus),  # type: ignore[call-overload]
                sm_active_ratio=None,
                reported_util_ratio=None,
                partition=None if row.get("partition") is None else str(row["partition"]),
                start_time=start if isinstance(start, datetime) else None,
                minutes=tuple(minutes.get(job_id, ())),
            )
        )
    return result
