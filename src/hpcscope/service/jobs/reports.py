"""Job reports and the live cluster state, constrained by the caller's principal.

Wiring only: store queries (constrained by :meth:`Principal.job_scope`) -> pure analysis ->
report objects. The web app and the CLI render what this returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypedDict, cast

import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.efficiency import gpu_summary
from hpcscope.analysis.jobs.report import JobReport as JobReport  # serve's pages name it
from hpcscope.analysis.jobs.report import job_reports
from hpcscope.model.access import Principal
from hpcscope.model.backends import GpuSampleReader
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.timeutil import iso_z
from hpcscope.store import reports as queries
from hpcscope.store import summaries as kept
from hpcscope.store.duck import Store

#: Jobs listed at most per request (newest first).
MAX_JOBS = 200


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
    samples: GpuSampleReader | None = None,
) -> list[JobReport]:
    """Reports of the jobs the principal may see: the newest :data:`MAX_JOBS`, or exactly
    ``job_ids`` among the visible ones (however old).

    ``samples`` is where GPU samples are read (``metrics_backend``; default the store's own);
    scheduler records and kept summaries always come from the store."""
    scope = principal.job_scope()
    if job_ids is None:
        jobs = _frame(queries.visible_jobs(store, scope, limit=MAX_JOBS))
        ids = set(jobs["job_id"].to_list())
        if scope.all_jobs:  # admins also get jobs seen on GPUs that the scheduler does not know
            ids |= set(queries.job_ids_in_samples(store, scope, since=now - timedelta(days=1)))
    else:
        jobs, ids = visible_jobs_by_id(store, principal, job_ids)
    summarised = kept.summarised_job_ids(store, sorted(ids))
    summary = gpu_frame(
        store,
        sorted(ids - summarised),
        summarised=sorted(summarised),
        scrape_interval_seconds=scrape_interval_seconds,
        samples=samples,
    )
    reports = job_reports(summary, jobs, now=now, gpu_hour_price=gpu_hour_price, currency=currency)
    return [
        replace(r, source="summary") if r.job_id in summarised else r
        for r in reports
        if r.job_id in ids
    ]


def gpu_frame(
    store: Store,
    raw_ids: Sequence[str],
    *,
    summarised: Sequence[str] = (),
    scrape_interval_seconds: float,
    samples: GpuSampleReader | None = None,
) -> pl.DataFrame:
    """The ``gpu_summary`` rows of jobs: computed from raw samples for ``raw_ids`` (read from
    ``samples``, default the store's own), read from the kept summaries for ``summarised``
    (finished jobs: their raw samples may be gone)."""
    reader = samples if samples is not None else queries.EmbeddedSamples(store)
    raw = _frame(reader.samples_for_jobs(raw_ids))
    summary = gpu_summary(
        raw, max_interval_seconds=max_sample_weight_seconds(scrape_interval_seconds)
    )
    if not summarised:
        return summary
    stored = _frame(kept.gpu_summaries_for_jobs(store, summarised))
    return pl.concat([summary, stored.select(summary.columns)], how="vertical_relaxed")


def visible_jobs_by_id(
    store: Store, principal: Principal, job_ids: list[str]
) -> tuple[pl.DataFrame, set[str]]:
    """The scheduler records and the ids of those of ``job_ids`` the principal may see.

    An id with GPU samples but no scheduler record is visible to admins only (deny by
    default): the record is then absent and the id is still returned."""
    scope = principal.job_scope()
    jobs = _frame(queries.jobs_by_id(store, job_ids, scope))
    ids = set(jobs["job_id"].to_list())
    if scope.all_jobs:
        ids |= set(queries.job_ids_with_samples(store, job_ids))
    return jobs, ids


class TargetHealth(TypedDict):
    """One scrape target over the window (``store.reports.scrape_health``'s columns)."""

    target: str
    exporter: str
    node: str | None
    last_attempt: datetime
    last_success: datetime | None
    failures_since_success: int
    last_error: str | None
    last_duration_seconds: float | None
    last_samples: int | None
    rejected_lines: int | None


@dataclass(frozen=True, slots=True)
class CollectionHealth:
    """The collector's own health: per target, the last attempt and success; recent gaps."""

    generated_at: datetime
    targets: tuple[TargetHealth, ...]
    gaps: tuple[dict[str, object], ...] = field(default_factory=tuple)  # of collection_gaps

    def to_dict(self) -> dict[str, object]:
        def plain(value: object) -> object:
            return iso_z(value) if isinstance(value, datetime) else value

        return {
            "generated_at": plain(self.generated_at),
            "targets": [{k: plain(v) for k, v in t.items()} for t in self.targets],
            "gaps": [{k: plain(v) for k, v in g.items()} for g in self.gaps],
        }


def collection_health(store: Store, *, now: datetime) -> CollectionHealth:
    """Per-target scrape health over the last 15 minutes and the gaps of the last hour.

    Holds no job data (targets are exporters and the scheduler), so it needs no scope."""
    health = cast(
        list[TargetHealth],
        queries.scrape_health(store, since=now - timedelta(minutes=15)).to_pylist(),
    )
    gaps = queries.collection_gaps(store, since=now - timedelta(hours=1)).to_pylist()
    return CollectionHealth(generated_at=now, targets=tuple(health), gaps=tuple(gaps))


@dataclass(frozen=True, slots=True)
class RunningJobGpu:
    """One GPU of a running job, averaged over a recent window (not the GPU's latest sample:
    that is :class:`hpcscope.service.diagram.live.GpuNow`)."""

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
    gpus: tuple[RunningJobGpu, ...]


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
        recent, max_interval_seconds=max_sample_weight_seconds(scrape_interval_seconds)
    )
    gpus = tuple(
        RunningJobGpu(
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
