"""Job reports and the live cluster state, constrained by the caller's principal.

Wiring only: store queries (constrained by :meth:`Principal.job_scope`) -> pure analysis ->
report objects. The web app and the CLI render what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pyarrow as pa

from hpcscope.analysis.efficiency import gpu_summary
from hpcscope.analysis.jobs import JobReport, job_reports
from hpcscope.model.access import Principal
from hpcscope.store import reports as queries
from hpcscope.store.duck import Store

#: Jobs listed at most per request (newest first).
MAX_JOBS = 200


def utcnow() -> datetime:
    """Naive UTC now: the store keeps naive UTC timestamps."""
    return datetime.now(UTC).replace(tzinfo=None)


def max_interval_seconds(scrape_interval_seconds: float) -> float:
    """A sample stands for at most three scrape intervals; beyond that the series has a gap."""
    return 3.0 * scrape_interval_seconds


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def reports_for(
    store: Store,
    principal: Principal,
    *,
    job_ids: list[str] | None = None,
    now: datetime,
    scrape_interval_seconds: float,
    gpu_hour_price: float,
    currency: str,
) -> list[JobReport]:
    """Reports of the jobs the principal may see (or of ``job_ids`` among them)."""
    scope = principal.job_scope()
    jobs = _frame(queries.visible_jobs(store, scope, limit=MAX_JOBS))
    ids = set(jobs["job_id"].to_list())
    if scope.all_jobs:  # admins also get jobs seen on GPUs that the scheduler does not know
        ids |= set(queries.job_ids_in_samples(store, scope, since=now - timedelta(days=1)))
    if job_ids is not None:
        ids &= set(job_ids)
        jobs = jobs.filter(pl.col("job_id").is_in(list(ids)))
    samples = _frame(queries.samples_for_jobs(store, sorted(ids)))
    summary = gpu_summary(
        samples, max_interval_seconds=max_interval_seconds(scrape_interval_seconds)
    )
    reports = job_reports(summary, jobs, now=now, gpu_hour_price=gpu_hour_price, currency=currency)
    return [r for r in reports if r.job_id in ids]


@dataclass(frozen=True, slots=True)
class GpuLive:
    """A GPU's latest state as a given principal may see it."""

    node: str
    gpu: int
    element_id: str
    state: str  # "free", "job" (visible), "allocated" (someone else's job), "stale"
    job_ids: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    reported_util_ratio: float | None = None
    sm_active_ratio: float | None = None
    tensor_active_ratio: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    xid: int | None = None
    last_sample: datetime | None = None


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What the overview shows: every GPU's latest state, collector health."""

    generated_at: datetime
    gpus: tuple[GpuLive, ...]
    targets: tuple[dict[str, Any], ...]
    gaps: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return value.isoformat() + "Z" if isinstance(value, datetime) else value

        return {
            "generated_at": plain(self.generated_at),
            "gpus": [
                {
                    k: plain(getattr(g, k))
                    if not isinstance(getattr(g, k), tuple)
                    else list(getattr(g, k))
                    for k in g.__dataclass_fields__
                }
                for g in self.gpus
            ],
            "targets": [{k: plain(v) for k, v in t.items()} for t in self.targets],
            "gaps": [{k: plain(v) for k, v in g.items()} for g in self.gaps],
        }


def cluster_state(
    store: Store,
    principal: Principal,
    *,
    node_gpus: list[tuple[str, int]],
    now: datetime,
    scrape_interval_seconds: float,
) -> ClusterState:
    """Latest state of every GPU, redacted for ``principal``.

    A GPU running someone else's job shows as ``allocated`` with no job id, user or values; a
    GPU without a recent sample is ``stale`` (a gap, not an idle GPU).
    """
    window = max(30.0, 3 * scrape_interval_seconds)
    scope = principal.job_scope()
    latest = queries.latest_gpu_samples(store, since=now - timedelta(seconds=window)).to_pylist()
    by_gpu: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in latest:
        by_gpu.setdefault((row["node"], int(row["gpu"])), []).append(row)
    gpus: list[GpuLive] = []
    for node, index in node_gpus:
        rows = by_gpu.get((node, index), [])
        element_id = f"gpu-{node}-{index}"
        if not rows:
            gpus.append(GpuLive(node, index, element_id, "stale"))
            continue
        newest = max(rows, key=lambda r: r["ts"])
        jobs = [r for r in rows if r["job_id"] is not None]
        visible = [
            r
            for r in jobs
            if scope.all_jobs
            or (
                r["job_user"] is not None
                and scope.admits(user=r["job_user"], account=r["job_account"])
            )
        ]
        if not jobs:
            state, shown = "free", newest
        elif visible:
            state, shown = "job", max(visible, key=lambda r: r["ts"])
        else:
            gpus.append(GpuLive(node, index, element_id, "allocated", last_sample=newest["ts"]))
            continue
        gpus.append(
            GpuLive(
                node=node,
                gpu=index,
                element_id=element_id,
                state=state,
                job_ids=tuple(r["job_id"] for r in visible),
                users=tuple(sorted({r["job_user"] for r in visible if r["job_user"]})),
                reported_util_ratio=shown["gpu_util_ratio"],
                sm_active_ratio=shown["sm_active_ratio"],
                tensor_active_ratio=shown["tensor_active_ratio"],
                temperature_celsius=shown["gpu_temperature_celsius"],
                power_watts=shown["power_watts"],
                xid=shown["xid_last"] or None,
                last_sample=newest["ts"],
            )
        )
    health = queries.scrape_health(store, since=now - timedelta(minutes=15)).to_pylist()
    gaps = queries.collection_gaps(store, since=now - timedelta(hours=1)).to_pylist()
    return ClusterState(generated_at=now, gpus=tuple(gpus), targets=tuple(health), gaps=tuple(gaps))


@dataclass(frozen=True, slots=True)
class LiveGpu:
    """One GPU of a running job over a recent window."""

    job_id: str
    node: str
    gpu: int
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    tensor_active_ratio: float | None
    verdict: str


@dataclass(frozen=True, slots=True)
class LiveJobs:
    """Jobs with samples in the window (whole-life reports) and their GPUs over the window."""

    jobs: tuple[JobReport, ...]
    gpus: tuple[LiveGpu, ...]


def live_job_gpus(
    store: Store,
    principal: Principal,
    *,
    now: datetime,
    window: timedelta,
    scrape_interval_seconds: float,
    gpu_hour_price: float,
    currency: str,
) -> LiveJobs:
    """What the jobs running in the last ``window`` are doing now, for ``principal``."""
    ids = queries.job_ids_in_samples(store, principal.job_scope(), since=now - window)
    if not ids:
        return LiveJobs((), ())
    jobs = reports_for(
        store,
        principal,
        job_ids=ids,
        now=now,
        scrape_interval_seconds=scrape_interval_seconds,
        gpu_hour_price=gpu_hour_price,
        currency=currency,
    )
    recent = _frame(queries.samples_for_jobs(store, ids, since=now - window))
    summary = gpu_summary(
        recent, max_interval_seconds=max_interval_seconds(scrape_interval_seconds)
    )
    gpus = tuple(
        LiveGpu(
            row["job_id"],
            row["node"],
            int(row["gpu"]),
            row["reported_util_ratio"],
            row["sm_active_ratio"],
            row["tensor_active_ratio"],
            row["verdict"],
        )
        for row in summary.sort(["job_id", "node", "gpu"]).iter_rows(named=True)
        if row["job_id"] is not None
    )
    return LiveJobs(tuple(jobs), gpus)
