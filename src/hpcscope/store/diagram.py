"""Store queries behind the live cluster diagram.

Every query that can reveal a job takes a :class:`~hpcscope.model.access.JobScope` and applies
it here, in SQL: a GPU held by a job outside the scope comes back as *allocated* with its job
id, user and counters nulled out, so nothing outside the scope leaves the store. Aggregates
(cluster-wide counts and means, queue length) are returned unscoped on purpose: they are the
"aggregate health" every viewer may see and they name no job or user.

Times are naive UTC ``TIMESTAMP`` values, as stored. Ratios are 0-1.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict, cast

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import VECTOR_NAMES, AlertState, Severity, Vector
from hpcscope.model.backends import GpuTime
from hpcscope.model.sampling import has_job_sql
from hpcscope.model.schemas import GPU_METRICS
from hpcscope.store import alert_index
from hpcscope.store.duck import Store

#: Counters a GPU card shows; nulled when the viewer may not see the GPU's job.
LIVE_GPU_COLUMNS: tuple[str, ...] = tuple(m.column for m in GPU_METRICS)


def _scope(scope: JobScope, alias: str = "j") -> tuple[str, list[object]]:
    """A boolean SQL expression (never NULL) that admits jobs of ``alias`` inside ``scope``."""
    sql, params = Store.scope_sql(
        scope, user_column=f'{alias}."user"', account_column=f"{alias}.account"
    )
    return f"coalesce({sql}, FALSE)", params


class GpuCounters(TypedDict):
    """The latest value of each column of :data:`LIVE_GPU_COLUMNS` (None: none, or masked)."""

    reported_util_ratio: float | None
    sm_active_ratio: float | None
    sm_occupancy_ratio: float | None
    tensor_active_ratio: float | None
    dram_active_ratio: float | None
    gr_engine_active_ratio: float | None
    fb_used_bytes: float | None
    fb_free_bytes: float | None
    power_watts: float | None
    energy_joules: float | None
    gpu_temperature_celsius: float | None
    memory_temperature_celsius: float | None
    sm_clock_hertz: float | None
    clock_throttle_reasons: int | None
    xid_last: int | None
    pcie_tx_bytes_per_second: float | None
    pcie_rx_bytes_per_second: float | None
    nvlink_tx_bytes_per_second: float | None
    nvlink_rx_bytes_per_second: float | None


class GpuStateRow(GpuCounters):
    """One GPU for one viewer (:func:`gpu_states`): who holds it and its latest counters."""

    node: str
    gpu: int
    ts: datetime | None
    allocated: bool
    visible_jobs: list[str]
    hidden_jobs: int
    values_visible: bool


class GpuHealth(TypedDict):
    """The cluster-wide aggregate every viewer may see (means over allocated reporting GPUs)."""

    gpus_reporting: int
    gpus_allocated: int
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    gpus_with_xid: int
    latest_ts: datetime | None


@dataclass(frozen=True, slots=True)
class GpuStates:
    """The latest state of every GPU for one viewer, and the cluster-wide aggregate.

    Attributes:
        rows: one row per GPU (see :func:`gpu_states`), counters masked for the viewer.
        health: the aggregate every viewer may see, computed before masking and naming no
            job.
    """

    rows: list[GpuStateRow]
    health: GpuHealth


def _aggregate(entries: list[GpuStateRow]) -> GpuHealth:
    reporting = [e for e in entries if e["ts"] is not None]
    allocated = [e for e in reporting if e["allocated"]]

    def mean(values: list[float | None]) -> float | None:
        present = [float(v) for v in values if v is not None]
        return math.fsum(present) / len(present) if present else None

    return {
        "gpus_reporting": len(reporting),
        "gpus_allocated": len(allocated),
        "reported_util_ratio": mean([e["reported_util_ratio"] for e in allocated]),
        "sm_active_ratio": mean([e["sm_active_ratio"] for e in allocated]),
        "gpus_with_xid": sum(1 for e in reporting if e["xid_last"]),
        "latest_ts": max((e["ts"] for e in reporting if e["ts"] is not None), default=None),
    }


def gpu_states(store: Store, *, latest: pa.Table, scope: JobScope, idle_values: bool) -> GpuStates:
    """The latest state of every GPU in ``latest`` or held by an open allocation.

    Jobs holding a GPU come from open ``job_allocations`` (the prolog's mapping) and from the
    ``job_id`` labels of the GPU's latest sample (a GPU shared by several jobs has one row per
    job with the same counters). Each holder is judged against ``scope`` in SQL; counters are
    then kept only for GPUs the viewer may see, before anything leaves this module. (Two
    small queries plan in a fraction of the time one query joining both takes.)

    Args:
        store: the store.
        latest: the newest sample of every live GPU (one row per job copy: ``GPU_SAMPLE_SCHEMA``
            rows, from the metrics backend's :meth:`~hpcscope.model.backends.GpuMetrics.latest`).
        scope: jobs the viewer may see; counters of a GPU are returned only when the GPU is
            held by at least one job inside the scope, or (with ``idle_values``) by no job.
        idle_values: return counters of GPUs that no job holds (the service: admins only).

    Returns:
        :class:`GpuStates`: one row per GPU, ordered by node and GPU, with ``node``, ``gpu``,
        ``ts`` (latest sample, None if none since ``since``), ``allocated`` (bool),
        ``visible_jobs`` (job ids inside the scope), ``hidden_jobs`` (count of jobs outside
        it), ``values_visible`` (bool) and every column of :data:`LIVE_GPU_COLUMNS` (None
        unless ``values_visible``); and the cluster-wide aggregate.
    """
    scope_sql, scope_params = _scope(scope)
    rows = {"latest_rows": latest.select(["ts", "node", "gpu", "job_id", *LIVE_GPU_COLUMNS])}
    holders = store.query(
        f"""
WITH latest AS (
  SELECT node, gpu, job_id FROM latest_rows
  QUALIFY ts = max(ts) OVER (PARTITION BY node, gpu)
),
holders AS (
  SELECT node, gpu, job_id FROM job_allocations WHERE end_time IS NULL
  UNION
  SELECT node, gpu, job_id FROM latest WHERE {has_job_sql("job_id")}
)
SELECT h.node, h.gpu, h.job_id, {scope_sql} AS visible
FROM holders h LEFT JOIN jobs j ON j.job_id = h.job_id
""",
        scope_params,
        tables=rows,
    ).to_pylist()
    newest = ", ".join(f"arg_max({c}, ts) AS {c}" for c in LIVE_GPU_COLUMNS)
    counters = store.query(
        f"SELECT node, gpu, max(ts) AS ts, {newest} FROM latest_rows GROUP BY node, gpu",
        tables=rows,
    ).to_pylist()
    # The query's columns are the row's (node, gpu, ts and LIVE_GPU_COLUMNS): the SQL is the
    # one place the row's shape comes from, hence the casts.
    merged: dict[tuple[str, int], GpuStateRow] = {}
    empty = dict.fromkeys(LIVE_GPU_COLUMNS)
    for row in counters:
        merged[(row["node"], int(row["gpu"]))] = cast(
            GpuStateRow, {**row, "allocated": False, "visible_jobs": [], "hidden_jobs": 0}
        )
    for holder in holders:
        key = (holder["node"], int(holder["gpu"]))
        entry = merged.setdefault(
            key,
            cast(
                GpuStateRow,
                {
                    "node": key[0],
                    "gpu": key[1],
                    "ts": None,
                    **empty,
                    "allocated": False,
                    "visible_jobs": [],
                    "hidden_jobs": 0,
                },
            ),
        )
        entry["allocated"] = True
        if holder["visible"]:
            entry["visible_jobs"].append(str(holder["job_id"]))
        else:
            entry["hidden_jobs"] += 1
    entries = [merged[key] for key in sorted(merged)]
    health = _aggregate(entries)  # before masking: an aggregate names no job
    for entry in entries:
        entry["visible_jobs"].sort()
        permitted = bool(entry["visible_jobs"]) or (not entry["allocated"] and idle_values)
        entry["values_visible"] = permitted and entry["ts"] is not None
        if not entry["values_visible"]:
            cast(dict[str, object], entry).update(empty)  # the counter columns, by name
    return GpuStates(entries, health)


def last_sample_times(store: Store, *, since: datetime) -> dict[tuple[str, int], datetime]:
    """When each GPU last reported since ``since`` (to say how stale a silent GPU is).

    Bounded by ``since`` so that a poll never scans the whole history. Timestamps only: no
    job, no counter, so no scope applies.
    """
    rows = store.query(
        "SELECT node, gpu, max(ts) AS ts FROM gpu_samples WHERE ts >= ? GROUP BY ALL", [since]
    ).to_pylist()
    return {(r["node"], int(r["gpu"])): r["ts"] for r in rows}


class ActiveJob(TypedDict):
    """A job's scheduler record as the diagram's cards show it."""

    job_id: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    submit_time: datetime | None
    start_time: datetime | None
    gpus: int | None
    nodes: str | None


class VisibleJob(ActiveJob):
    """A job's scheduler record, with its end."""

    end_time: datetime | None


def visible_jobs(store: Store, *, scope: JobScope, job_ids: Sequence[str]) -> list[VisibleJob]:
    """Scheduler records of ``job_ids`` that are inside ``scope`` (others are simply absent)."""
    if not job_ids:
        return []
    scope_sql, scope_params = _scope(scope)
    marks = ", ".join("?" for _ in job_ids)
    sql = f"""
SELECT j.job_id, j.name, j."user", j.account, j.partition, j.state, j.submit_time,
       j.start_time, j.end_time, j.gpus, j.nodes
FROM jobs j WHERE j.job_id IN ({marks}) AND {scope_sql} ORDER BY j.job_id
"""
    return cast(list[VisibleJob], store.query(sql, [*job_ids, *scope_params]).to_pylist())


def recent_job_samples(store: Store, *, scope: JobScope, since: datetime) -> pa.Table:
    """GPU samples since ``since`` of the jobs inside ``scope`` (for live per-GPU verdicts).

    Samples of a job the scheduler has not described are returned to admins only.
    """
    scope_sql, scope_params = _scope(scope)
    return store.query(
        f"""
SELECT s.* FROM gpu_samples s LEFT JOIN jobs j ON j.job_id = s.job_id
WHERE s.ts >= ? AND {has_job_sql("s.job_id")} AND {scope_sql}
""",
        [since, *scope_params],
    )


def gpu_time(
    store: Store,
    *,
    scope: JobScope,
    since: datetime,
    until: datetime,
    max_interval_seconds: float,
    job_ids: Sequence[str] | None = None,
) -> GpuTime:
    """GPU time of jobs inside ``scope`` (and among ``job_ids`` when given) between ``since``
    and ``until``.

    The sample-weight rule of :mod:`hpcscope.model.sampling`, in SQL, exactly as
    :func:`hpcscope.analysis.jobs.efficiency.with_time_weights` applies it (property tests
    hold the two equal): each sample stands for the interval until the next sample of its
    series (job, node, GPU, MIG instance) inside the window, clipped to
    ``max_interval_seconds``; past the cap the series has a gap, and the sample before the gap
    weighs the cap. The last sample of a series weighs the series' median interval (the cap
    when it is alone).
    """
    ids = list(job_ids) if job_ids is not None else []
    among = ""
    if job_ids is not None:
        among = f" AND s.job_id IN ({', '.join('?' for _ in ids)})" if ids else " AND FALSE"
    scope_sql, scope_params = _scope(scope)
    sql = f"""
WITH s AS (
  SELECT s.node, s.gpu, s.gpu_instance_id, s.job_id, s.ts,
         -- NaN is unknown, as in the analysis: neither measured nor useful
         CASE WHEN isnan(s.reported_util_ratio) THEN NULL ELSE s.reported_util_ratio END
           AS reported_util_ratio,
         CASE WHEN isnan(s.sm_active_ratio) THEN NULL ELSE s.sm_active_ratio END
           AS sm_active_ratio,
         date_diff('microsecond', s.ts, lead(s.ts) OVER series) / 1e6 AS gap
  FROM gpu_samples s LEFT JOIN jobs j ON j.job_id = s.job_id
  WHERE s.ts >= ? AND s.ts < ? AND {has_job_sql("s.job_id")} AND {scope_sql}{among}
  WINDOW series AS (PARTITION BY s.job_id, s.node, s.gpu, s.gpu_instance_id ORDER BY s.ts)
),
w AS (
  SELECT *, greatest(0.0, least(CAST(? AS DOUBLE), coalesce(
           gap, median(gap) OVER (PARTITION BY job_id, node, gpu, gpu_instance_id),
           CAST(? AS DOUBLE)))) AS seconds
  FROM s
)
SELECT coalesce(sum(seconds), 0) AS allocated_seconds,
       coalesce(sum(seconds) FILTER (WHERE sm_active_ratio IS NOT NULL), 0) AS measured_seconds,
       coalesce(sum(seconds * sm_active_ratio), 0) AS useful_seconds,
       coalesce(sum(seconds * reported_util_ratio), 0) AS reported_busy_seconds,
       min(ts) AS first_ts, max(ts) AS last_ts, count(DISTINCT job_id) AS jobs
FROM w
"""
    params = [since, until, *scope_params, *ids, max_interval_seconds, max_interval_seconds]
    row = store.query(sql, params).to_pylist()[0]
    return GpuTime(
        allocated_seconds=float(row["allocated_seconds"]),
        measured_seconds=float(row["measured_seconds"]),
        useful_seconds=float(row["useful_seconds"]),
        reported_busy_seconds=float(row["reported_busy_seconds"]),
        first_ts=row["first_ts"],
        last_ts=row["last_ts"],
        jobs=int(row["jobs"]),
    )


class SchedulerSummary(TypedDict):
    """Queue and wait figures: jobs ``started_since`` the window's start, and of those the
    waits from submission (median, p90) and from eligibility (median)."""

    pending: int
    running: int
    oldest_pending_submit: datetime | None
    started_since: int
    wait_median_seconds: float | None
    wait_p90_seconds: float | None
    eligible_wait_median_seconds: float | None


def scheduler_summary(store: Store, *, now: datetime, since: datetime) -> SchedulerSummary:
    """Queue and wait figures over every job (counts and durations only, no names)."""
    sql = """
WITH j AS (SELECT *, upper(coalesce(state, '')) AS st FROM jobs),
started AS (
  SELECT date_diff('microsecond', submit_time, start_time) / 1e6 AS wait,
         date_diff('microsecond', coalesce(eligible_time, submit_time), start_time) / 1e6
           AS eligible_wait
  FROM j WHERE start_time >= ? AND start_time <= ? AND submit_time IS NOT NULL
)
SELECT (SELECT count(*) FROM j WHERE st LIKE 'PENDING%') AS pending,
       (SELECT count(*) FROM j WHERE st LIKE 'RUNNING%') AS running,
       (SELECT min(submit_time) FROM j WHERE st LIKE 'PENDING%') AS oldest_pending_submit,
       (SELECT count(*) FROM started) AS started_since,
       (SELECT quantile_cont(greatest(wait, 0), 0.5) FROM started) AS wait_median_seconds,
       (SELECT quantile_cont(greatest(wait, 0), 0.9) FROM started) AS wait_p90_seconds,
       (SELECT quantile_cont(greatest(eligible_wait, 0), 0.5) FROM started)
         AS eligible_wait_median_seconds
"""
    return cast(SchedulerSummary, store.query(sql, [since, now]).to_pylist()[0])


def active_jobs(store: Store, *, scope: JobScope, limit: int = 50) -> list[ActiveJob]:
    """Pending and running jobs inside ``scope``, oldest submission first."""
    scope_sql, scope_params = _scope(scope)
    sql = f"""
SELECT j.job_id, j.name, j."user", j.account, j.partition, j.state, j.submit_time,
       j.start_time, j.gpus, j.nodes
FROM jobs j
WHERE (upper(coalesce(j.state, '')) LIKE 'PENDING%' OR upper(coalesce(j.state, '')) LIKE
       'RUNNING%') AND {scope_sql}
ORDER BY j.submit_time NULLS LAST, j.job_id LIMIT ?
"""
    return cast(list[ActiveJob], store.query(sql, [*scope_params, limit]).to_pylist())


class ScrapeHealth(TypedDict):
    """One exporter's collection: ``scrapes``, ``failures`` and ``rejected_lines`` since the
    window's start, ``failing_targets`` (whose latest scrape failed), ``last_error`` (the
    latest failure's text)."""

    exporter: str
    targets: int
    last_ts: datetime
    last_ok_ts: datetime | None
    scrapes: int
    failures: int
    rejected_lines: int
    last_error: str | None
    failing_targets: int


def scrape_health(store: Store, *, since: datetime) -> list[ScrapeHealth]:
    """hpcscope's own collection, per exporter: targets, last scrape, failures since
    ``since``."""
    sql = """
WITH last_per_target AS (
  SELECT exporter, target, arg_max(ok, ts) AS ok FROM scrapes GROUP BY exporter, target
)
SELECT s.exporter,
       count(DISTINCT s.target) AS targets,
       max(s.ts) AS last_ts,
       max(s.ts) FILTER (WHERE s.ok) AS last_ok_ts,
       count(*) FILTER (WHERE s.ts >= ?) AS scrapes,
       count(*) FILTER (WHERE s.ts >= ? AND NOT s.ok) AS failures,
       CAST(coalesce(sum(s.rejected_lines) FILTER (WHERE s.ts >= ?), 0) AS BIGINT)
         AS rejected_lines,
       arg_max(s.error, s.ts) FILTER (WHERE NOT s.ok) AS last_error,
       (SELECT count(*) FROM last_per_target t WHERE t.exporter = s.exporter AND NOT t.ok)
         AS failing_targets
FROM scrapes s GROUP BY s.exporter ORDER BY s.exporter
"""
    return cast(list[ScrapeHealth], store.query(sql, [since, since, since]).to_pylist())


#: The alerts table (migration 7, ``store/alerts.py``) and the columns the diagram reads.
ALERTS_TABLE = "alerts"
ALERT_COLUMNS = frozenset({"vector", "node", "severity", "state"})
#: Stores whose alerts table has :data:`ALERT_COLUMNS` (the counts are read after every alert
#: write: the catalog is asked once, not each time).
_HAS_ALERT_COLUMNS: weakref.WeakSet[Store] = weakref.WeakSet()


_VECTOR_NAMES = {**VECTOR_NAMES, Vector.SERVICE_LEVEL: "service-level"}
_VECTOR_CASE = " ".join(f"WHEN {int(v)} THEN '{name}'" for v, name in _VECTOR_NAMES.items())
_SEVERITY_CASE = " ".join(f"WHEN {int(s)} THEN '{s.name}'" for s in Severity)
#: :func:`open_alert_counts`' query, written once (it runs after every alert write).
_OPEN_ALERT_COUNTS_SQL = (
    f"SELECT CASE a.vector {_VECTOR_CASE} ELSE CAST(a.vector AS VARCHAR) END AS vector, "
    f"a.node, CASE a.severity {_SEVERITY_CASE} ELSE CAST(a.severity AS VARCHAR) END "
    'AS severity, j."user" AS "user", j.account AS account, count(*) AS open '
    f"FROM {ALERTS_TABLE} a LEFT JOIN jobs j ON j.job_id = a.job_id WHERE a.state <> ? "
    "GROUP BY ALL ORDER BY vector, node NULLS LAST, severity"
)


class OpenAlertCount(TypedDict):
    """Open alerts of one vector name (``VECTOR_NAMES``), node and severity name."""

    vector: str
    node: str | None
    severity: str
    user: str | None
    account: str | None
    open: int


def open_alert_counts(store: Store, *, as_read: bool = False) -> list[OpenAlertCount] | None:
    """Open alerts (acknowledged included: not resolved) per vector name, node and severity.

    Rows: ``vector`` (the catalog id of :data:`~hpcscope.model.alerts.VECTOR_NAMES`), ``node``
    (nullable), ``severity`` (``LOW`` .. ``CRITICAL``), the job's ``user`` and ``account``
    from ``jobs`` (null for an alert on no known job: a node-scoped alert, which only a
    principal who sees every alert may count) and ``open`` (a count). None when the
    store has no alerts table (an older store before its migrations run): the diagram then
    says detections are not configured instead of showing zeros. ``as_read``: from the
    alert index with the jobs' owners as last read, never a query for them
    (:func:`~hpcscope.store.alert_index.owners_as_read`).
    """
    # the table in memory
    indexed = alert_index.indexed_open_counts(store, _VECTOR_NAMES, as_read=as_read)
    if indexed is not None:
        return cast(list[OpenAlertCount], indexed)
    if store not in _HAS_ALERT_COLUMNS:  # checked until they are there (migrations only add)
        columns = {
            str(r["column_name"])
            for r in store.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                [ALERTS_TABLE],
            ).to_pylist()
        }
        if not columns >= ALERT_COLUMNS:
            return None
        _HAS_ALERT_COLUMNS.add(store)
    rows = store.query(_OPEN_ALERT_COUNTS_SQL, [AlertState.RESOLVED.value])
    return cast(list[OpenAlertCount], rows.to_pylist())
