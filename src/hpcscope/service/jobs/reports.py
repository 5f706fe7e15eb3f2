"""Job reports and the live cluster state, constrained by the caller's principal.

Wiring only: store queries (constrained by :meth:`Principal.job_scope`) -> pure analysis ->
report objects. The web app and the CLI render what this returns.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypedDict, cast

import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.aggregates import LIVE_GPU_COLUMNS, summary_from_aggregates
from hpcscope.analysis.jobs.efficiency import gpu_summary
from hpcscope.analysis.jobs.report import JobReport as JobReport  # serve's pages name it
from hpcscope.analysis.jobs.report import job_reports, job_sort_key
from hpcscope.model.access import Principal
from hpcscope.model.backends import STORE_READ, GpuMetrics, JobGpuRead, ReadSource
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import iso_z
from hpcscope.store import reports as queries
from hpcscope.store import summaries as kept
from hpcscope.store.duck import Store

#: Jobs listed at most per request (newest first).
MAX_JOBS = 200

#: ``since`` of a read that reaches as far back as the backend keeps samples.
UNBOUNDED_PAST = datetime(1970, 1, 1)


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


#: How far before a job's scheduled start its GPUs are read (clocks of Slurm and exporters).
START_MARGIN = timedelta(minutes=2)


def reports_for(
    store: Store,
    principal: Principal,
    *,
    job_ids: list[str] | None = None,
    now: datetime,
    scrape_interval_seconds: float,
    gpu_hour_price: float,
    currency: str,
    samples: GpuMetrics | None = None,
    shared: Sequence[JobReport] = (),
) -> list[JobReport]:
    """Reports of the jobs the principal may see: the newest :data:`MAX_JOBS`, or exactly
    ``job_ids`` among the visible ones (however old), as of ``now``.

    ``samples`` is where GPU samples are read (``metrics_backend``; default the store's own);
    scheduler records and kept summaries always come from the store. A report computed from
    the backend carries how it was read (``metrics``). ``shared``: reports another read of the
    same data made (the list of every job): a job without a kept summary found there is taken
    as it is, not read again (a job's report is the same for everyone who may see it; the
    raw samples of running jobs are most of a list's cost)."""
    metrics = samples if samples is not None else queries.EmbeddedSamples(store)
    scope = principal.job_scope()
    if job_ids is None:
        jobs = _frame(queries.visible_jobs(store, scope, limit=MAX_JOBS))
        ids = set(jobs["job_id"].to_list())
        if scope.all_jobs:  # admins also get jobs seen on GPUs that the scheduler does not know
            ids |= set(metrics.jobs_seen(since=now - timedelta(days=1), until=now))
    else:
        jobs, ids = visible_jobs_by_id(store, principal, job_ids, metrics=metrics, now=now)
    summarised = kept.summarised_job_ids(store, sorted(ids))
    # a shared report is taken only as it reads the scheduler's record now: the list of every
    # job may be a generation older, from before Slurm knew a job seen on its GPUs (no user,
    # no account) or before it ended, and a scope's list never shows an owner it did not check
    records = (
        {row["job_id"]: _record_of(row) for row in jobs.iter_rows(named=True)} if shared else {}
    )
    taken = {
        r.job_id: r
        for r in shared
        if r.job_id in ids
        and r.job_id not in summarised
        and records.get(r.job_id, _UNKNOWN_RECORD) == _copied_record(r)
    }
    if taken:
        jobs = jobs.filter(~pl.col("job_id").is_in(list(taken)))
    raw_ids = sorted(ids - summarised - taken.keys())
    summary, source = gpu_frame_read(
        store,
        raw_ids,
        summarised=sorted(summarised),
        scrape_interval_seconds=scrape_interval_seconds,
        samples=metrics,
        since=earliest_start(jobs, raw_ids),
        until=now,
    )
    reports = job_reports(summary, jobs, now=now, gpu_hour_price=gpu_hour_price, currency=currency)
    found = [
        replace(r, source="summary") if r.job_id in summarised else replace(r, metrics=source)
        for r in reports
        if r.job_id in ids and r.job_id not in taken
    ]
    if not taken:
        return found
    return sorted([*found, *taken.values()], key=lambda r: job_sort_key(r.job_id))


#: The scheduler record's columns a report copies, and the report's names of them (the
#: record's ``gpus`` is a report's ``gpus_allocated``): one list for both sides.
_RECORD_FIELDS = {
    "name": "name",
    "user": "user",
    "account": "account",
    "partition": "partition",
    "state": "state",
    "start_time": "start_time",
    "end_time": "end_time",
    "gpus": "gpus_allocated",
}
_Record = tuple[object, ...]
#: The record of a job the scheduler does not know (seen on GPUs only).
_UNKNOWN_RECORD: _Record = (None,) * len(_RECORD_FIELDS)


def _record_of(row: dict[str, object]) -> _Record:
    """The scheduler's fields of a job's record row."""
    return tuple(row.get(column) for column in _RECORD_FIELDS)


def _copied_record(report: JobReport) -> _Record:
    """The scheduler's fields as ``report`` copied them (:func:`_record_of`'s order)."""
    return tuple(getattr(report, name) for name in _RECORD_FIELDS.values())


def earliest_start(jobs: pl.DataFrame, job_ids: Sequence[str]) -> datetime | None:
    """The earliest scheduled start of ``job_ids`` less :data:`START_MARGIN`; None when one of
    them has no start (a job the scheduler does not know, or not started)."""
    if not job_ids or "start_time" not in jobs.columns:
        return None
    wanted = jobs.filter(pl.col("job_id").is_in(list(job_ids)))
    starts = wanted["start_time"]
    if wanted.height < len(set(job_ids)) or starts.null_count():
        return None
    first = starts.min()
    return first - START_MARGIN if isinstance(first, datetime) else None


class _AggregateRows:
    """The ``gpu_summary`` rows of the last few aggregate answers, by the answer itself: an
    engine's kept answer (``service/backends/rule_cache.py``) is one table read by every page
    built from it (the overview folds three, every call), folded once."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._rows: OrderedDict[int, tuple[pa.Table, pl.DataFrame]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, table: pa.Table) -> pl.DataFrame:
        with self._lock:
            kept = self._rows.get(id(table))
            if kept is not None and kept[0] is table:
                self._rows.move_to_end(id(table))
                return kept[1]
        rows = summary_from_aggregates(_frame(table))
        with self._lock:  # the table is held with its rows: its id is not reused meanwhile
            self._rows[id(table)] = (table, rows)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)
        return rows


_AGGREGATE_ROWS = _AggregateRows()


def gpu_rows(read: JobGpuRead, *, scrape_interval_seconds: float) -> pl.DataFrame:
    """The ``gpu_summary`` rows of what a backend answered: aggregates folded (once per
    answer), raw samples weighed (each to the next, capped at the read's cap or three scrape
    intervals)."""
    if read.aggregates is not None:
        return _AGGREGATE_ROWS.of(read.aggregates)
    samples = read.samples if read.samples is not None else GPU_SAMPLE_SCHEMA.empty_table()
    cap = read.max_interval_seconds or max_sample_weight_seconds(scrape_interval_seconds)
    return gpu_summary(_frame(samples), max_interval_seconds=cap)


def gpu_frame_read(
    store: Store,
    raw_ids: Sequence[str],
    *,
    summarised: Sequence[str] = (),
    scrape_interval_seconds: float,
    samples: GpuMetrics | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[pl.DataFrame, ReadSource]:
    """The ``gpu_summary`` rows of jobs: computed from the backend's answer for ``raw_ids``
    (``samples``, default the store's own), read from the kept summaries for ``summarised``
    (finished jobs: their raw samples may be gone); and how the backend answered."""
    reader = samples if samples is not None else queries.EmbeddedSamples(store)
    if raw_ids:
        read = reader.job_gpus(raw_ids, since=since, until=until)
    else:
        read = JobGpuRead(STORE_READ, samples=GPU_SAMPLE_SCHEMA.empty_table())
    summary = gpu_rows(read, scrape_interval_seconds=scrape_interval_seconds)
    if not summarised:
        return summary, read.source
    stored = _frame(kept.gpu_summaries_for_jobs(store, summarised))
    frame = pl.concat([summary, stored.select(summary.columns)], how="vertical_relaxed")
    return frame, read.source


def gpu_frame(
    store: Store,
    raw_ids: Sequence[str],
    *,
    summarised: Sequence[str] = (),
    scrape_interval_seconds: float,
    samples: GpuMetrics | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """:func:`gpu_frame_read` without the read's source."""
    frame, _ = gpu_frame_read(
        store,
        raw_ids,
        summarised=summarised,
        scrape_interval_seconds=scrape_interval_seconds,
        samples=samples,
        since=since,
        until=until,
    )
    return frame


def visible_jobs_by_id(
    store: Store,
    principal: Principal,
    job_ids: list[str],
    *,
    metrics: GpuMetrics | None = None,
    now: datetime | None = None,
) -> tuple[pl.DataFrame, set[str]]:
    """The scheduler records and the ids of those of ``job_ids`` the principal may see.

    An id with GPU samples but no scheduler record is visible to admins only (deny by
    default): the record is then absent and the id is still returned (samples within the
    backend's reach: the embedded store's whole history, an engine's lookback)."""
    scope = principal.job_scope()
    jobs = _frame(queries.jobs_by_id(store, job_ids, scope))
    ids = set(jobs["job_id"].to_list())
    unknown = sorted(set(job_ids) - ids)
    if scope.all_jobs and unknown:
        reader = metrics if metrics is not None else queries.EmbeddedSamples(store)
        ids |= set(reader.jobs_seen(since=UNBOUNDED_PAST, until=now, job_ids=unknown))
    return jobs, ids


def seen_and_visible(
    store: Store,
    principal: Principal,
    metrics: GpuMetrics,
    *,
    since: datetime,
    until: datetime | None = None,
) -> list[str]:
    """Job ids with GPU samples in ``[since, until]`` that ``principal`` may see (admins also
    those the scheduler does not know), sorted."""
    seen = metrics.jobs_seen(since=since, until=until)
    if not seen:
        return []
    scope = principal.job_scope()
    known = set(_frame(queries.jobs_by_id(store, seen, scope))["job_id"].to_list())
    return sorted(set(seen) if scope.all_jobs else known)


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


#: Gaps of the last hour the collector's health lists, the latest: a collector stalled by load
#: leaves one per target per stall (thousands an hour at 128 nodes), and the health is kept
#: and sent with every poll of the overview and ``/api/cluster``; the count is of them all.
HEALTH_GAPS = 100


@dataclass(frozen=True, slots=True)
class CollectionHealth:
    """The collector's own health: per target, the last attempt and success; recent gaps."""

    generated_at: datetime
    targets: tuple[TargetHealth, ...]
    #: the latest :data:`HEALTH_GAPS` rows of ``collection_gaps`` in the last hour, oldest first
    gaps: tuple[dict[str, object], ...] = field(default_factory=tuple)
    gaps_last_hour: int = 0  # every gap of the last hour, listed or not

    def to_dict(self) -> dict[str, object]:
        def plain(value: object) -> object:
            return iso_z(value) if isinstance(value, datetime) else value

        return {
            "generated_at": plain(self.generated_at),
            "targets": [{k: plain(v) for k, v in t.items()} for t in self.targets],
            "gaps": [{k: plain(v) for k, v in g.items()} for g in self.gaps],
            "gaps_last_hour": self.gaps_last_hour,
        }


def collection_health(store: Store, *, now: datetime) -> CollectionHealth:
    """Per-target scrape health over the last 15 minutes and the gaps of the last hour.

    Holds no job data (targets are exporters and the scheduler), so it needs no scope."""
    health = cast(
        list[TargetHealth],
        queries.scrape_health(store, since=now - timedelta(minutes=15)).to_pylist(),
    )
    gaps, count = queries.collection_gaps(store, since=now - timedelta(hours=1), limit=HEALTH_GAPS)
    return CollectionHealth(
        generated_at=now, targets=tuple(health), gaps=tuple(gaps.to_pylist()), gaps_last_hour=count
    )


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
    samples: GpuMetrics | None = None,
) -> LiveJobs:
    """What the jobs running in the last ``window`` are doing now, for ``principal``."""
    metrics = samples if samples is not None else queries.EmbeddedSamples(store)
    ids = seen_and_visible(store, principal, metrics, since=now - window, until=now)
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
        samples=metrics,
    )
    recent = metrics.job_gpus(ids, since=now - window, until=now, columns=LIVE_GPU_COLUMNS)
    summary = gpu_rows(recent, scrape_interval_seconds=scrape_interval_seconds)
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
