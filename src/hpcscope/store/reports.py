"""Queries behind the job reports, the cluster overview and the collector's own health.

Every query that returns job data takes a :class:`JobScope` and applies it in SQL: samples are
visible only through a job the scope admits; samples of a job the scheduler has not described
(no row in ``jobs``) are visible to admins only (deny by default).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.backends import (
    STORE_READ,
    GpuTime,
    JobGpuRead,
    MetricsBackend,
    ReadSource,
    TimeseriesRead,
)
from hpcscope.model.sampling import has_job_sql
from hpcscope.store import cold, diagram, node_facts, rollups
from hpcscope.store import telemetry_rules as telemetry_queries
from hpcscope.store.duck import Store
from hpcscope.store.filters import Where
from hpcscope.store.time_ranges import job_time_ranges

_SAMPLE_COLUMNS = "s.*"


def _job_filter(scope: JobScope, alias: str = "j") -> tuple[str, list[object]]:
    where, params = Store.scope_sql(
        scope, user_column=f'{alias}."user"', account_column=f"{alias}.account"
    )
    return where, params


def visible_jobs(store: Store, scope: JobScope, *, limit: int = 1000) -> pa.Table:
    """Scheduler records of the jobs ``scope`` admits, newest first."""
    where, params = _job_filter(scope)
    return store.query(
        f"SELECT * FROM jobs j WHERE {where} "
        "ORDER BY coalesce(j.start_time, j.submit_time) DESC NULLS LAST, j.job_id DESC "
        f"LIMIT {int(limit)}",
        params,
    )


def job_ids_in_samples(store: Store, scope: JobScope, *, since: datetime) -> list[str]:
    """Job ids seen in GPU samples since ``since`` that ``scope`` admits.

    Admins also see ids that have no scheduler record (a GPU in use by a job Slurm does not
    know is itself a finding)."""
    if scope.all_jobs:
        rows = store.query(
            f"SELECT DISTINCT job_id FROM gpu_samples WHERE ts >= ? AND {has_job_sql('job_id')}",
            [since],
        )
    else:
        where, params = _job_filter(scope)
        rows = store.query(
            "SELECT DISTINCT s.job_id FROM gpu_samples s JOIN jobs j ON j.job_id = s.job_id "
            f"WHERE s.ts >= ? AND {where}",
            [since, *params],
        )
    return [str(v) for v in rows.column("job_id").to_pylist()]


def job_owners(store: Store, *, limit: int) -> dict[str, tuple[str | None, str | None, bool]]:
    """Per job of the latest ``limit`` (by start, else submission): its user, its account and
    whether it ended (what :meth:`JobScope.admits` and the snapshots' freshness read)."""
    rows = store.query(
        'SELECT job_id, "user", account, end_time IS NOT NULL AS ended FROM jobs '
        "ORDER BY coalesce(start_time, submit_time) DESC NULLS LAST, job_id DESC "
        f"LIMIT {int(limit)}"
    ).to_pydict()
    return {
        str(job_id): (user, account, bool(ended))
        for job_id, user, account, ended in zip(
            rows["job_id"], rows["user"], rows["account"], rows["ended"], strict=True
        )
    }


def jobs_by_id(store: Store, job_ids: Sequence[str], scope: JobScope) -> pa.Table:
    """Scheduler records of ``job_ids`` that ``scope`` admits (however old they are)."""
    if not job_ids:
        return store.query("SELECT * FROM jobs WHERE FALSE")
    where, params = _job_filter(scope)
    marks = ", ".join("?" for _ in job_ids)
    return store.query(
        f"SELECT * FROM jobs j WHERE j.job_id IN ({marks}) AND {where}", [*job_ids, *params]
    )


def samples_for_jobs(
    store: Store,
    job_ids: Sequence[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """GPU samples of the given jobs (the caller has already checked visibility)."""
    if not job_ids:
        return store.query("SELECT * FROM gpu_samples WHERE FALSE")
    where = Where().among("job_id", list(job_ids)).window(since, until)
    hot = store.query(f"SELECT * FROM gpu_samples {where.sql()}", where.params)
    old = cold.cold_samples(store, job_ids, since=since, until=until)
    if old is None or old.num_rows == 0:
        return hot
    return pa.concat_tables([old.select(hot.column_names).cast(hot.schema), hot])


def gpu_timeseries(
    store: Store, job_id: str, *, bucket_seconds: int, since: datetime | None = None
) -> pa.Table:
    """Per GPU of a job, reported and real efficiency averaged in time buckets (downsampled on
    the server: a chart never receives raw per-second points)."""
    params: list[object] = [job_id]
    window = ""
    if since is not None:
        window = " AND ts >= ?"
        params.append(since)
    return store.query(
        f"SELECT time_bucket(INTERVAL '{int(bucket_seconds)} seconds', ts) AS bucket, node, gpu, "
        "avg(reported_util_ratio) AS reported_util_ratio, avg(sm_active_ratio) AS sm_active_ratio, "
        "avg(tensor_active_ratio) AS tensor_active_ratio "
        f"FROM gpu_samples WHERE job_id = ?{window} "
        "GROUP BY ALL ORDER BY bucket, node, gpu",
        params,
    )


def timeseries_of_jobs(
    store: Store,
    job_ids: Sequence[str],
    *,
    bucket_seconds: int,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """Per job GPU, reported and real efficiency averaged in time buckets, from raw samples
    (the cold tier's too: zoom-in on a job past retention)."""
    buckets = (
        f"SELECT time_bucket(INTERVAL '{int(bucket_seconds)} seconds', ts) AS bucket, job_id, "
        "node, gpu, avg(reported_util_ratio) AS reported_util_ratio, "
        "avg(sm_active_ratio) AS sm_active_ratio, avg(tensor_active_ratio) AS tensor_active_ratio "
    )
    order = "GROUP BY ALL ORDER BY bucket, job_id, node, gpu"
    if cold.has_cold(store):
        rows = samples_for_jobs(store, job_ids, since=since, until=until)
        return store.query(f"{buckets} FROM raw_rows {order}", tables={"raw_rows": rows})
    where = Where().among("job_id", list(job_ids)).window(since, until)
    return store.query(f"{buckets} FROM gpu_samples {where.sql()} {order}", where.params)


def sample_time_range(
    store: Store,
    job_id: str,
    *,
    cold_since: datetime | None = None,
    cold_until: datetime | None = None,
) -> tuple[datetime | None, datetime | None]:
    """First and last raw sample time of a job (the cold tier's included: its parts within
    ``[cold_since, cold_until]`` only, when given: a month of daily parts costs a scan each)."""
    row = store.query(
        "SELECT min(ts) AS first, max(ts) AS last FROM gpu_samples WHERE job_id = ?", [job_id]
    ).to_pylist()[0]
    first, last = row["first"], row["last"]
    old = cold.cold_samples(
        store,
        [job_id],
        since=cold_since,
        until=cold_until,
        columns="min(ts) AS first, max(ts) AS last",
    )
    if old is not None and old.num_rows:
        cold_row = old.to_pylist()[0]
        if cold_row["first"] is not None:
            first = cold_row["first"] if first is None else min(first, cold_row["first"])
            last = cold_row["last"] if last is None else max(last, cold_row["last"])
    return first, last


def sample_time_ranges(
    store: Store, windows: Mapping[str, tuple[datetime | None, datetime | None]]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """:func:`sample_time_range` of each job of ``windows`` (its cold tier's window), in two
    queries for all of them (a keeper's batch); (None, None) for a job without samples."""
    ranges = job_time_ranges(
        store,
        "SELECT job_id, min(ts) AS first, max(ts) AS last FROM gpu_samples",
        windows,
        grouped=True,
    )
    for job_id, (first, last) in cold.cold_time_ranges(store, windows).items():
        old_first, old_last = ranges[job_id]
        ranges[job_id] = (
            first if old_first is None else min(old_first, first),
            last if old_last is None else max(old_last, last),
        )
    return ranges


def scrape_health(store: Store, *, since: datetime) -> pa.Table:
    """Per target: last attempt, last success, failures since the last success, last error."""
    return store.query(
        "WITH recent AS (SELECT * FROM scrapes WHERE ts >= ?), "
        "last_ok AS (SELECT target, max(ts) AS last_success FROM recent WHERE ok "
        "            GROUP BY target) "
        "SELECT r.target, any_value(r.exporter) AS exporter, any_value(r.node) AS node, "
        "max(r.ts) AS last_attempt, any_value(l.last_success) AS last_success, "
        "count(*) FILTER (WHERE NOT r.ok AND (l.last_success IS NULL OR r.ts > l.last_success))"
        "  AS failures_since_success, "
        "arg_max(r.error, r.ts) AS last_error, arg_max(r.duration_seconds, r.ts) AS "
        "last_duration_seconds, arg_max(r.samples, r.ts) AS last_samples, "
        "CAST(sum(r.rejected_lines) AS BIGINT) AS rejected_lines "
        "FROM recent r LEFT JOIN last_ok l ON l.target = r.target "
        "GROUP BY r.target ORDER BY r.target",
        [since],
    )


def collection_gaps(store: Store, *, since: datetime, limit: int) -> tuple[pa.Table, int]:
    """The latest ``limit`` recorded collection gaps that end after ``since``, oldest first,
    and how many end after it."""
    table = store.query(
        "SELECT * FROM (SELECT *, count(*) OVER () AS total FROM collection_gaps "
        "WHERE end_ts >= ? ORDER BY start_ts DESC, target DESC LIMIT ?) "
        "ORDER BY start_ts, target",
        [since, limit],
    )
    total = int(table.column("total")[0].as_py()) if table.num_rows else 0
    return table.drop_columns(["total"]), total


class EmbeddedSamples:
    """The embedded backend's :class:`~hpcscope.model.backends.GpuMetrics`: the tables
    hpcscope's collector fills (raw ``gpu_samples``, 1-minute rollups)."""

    source = STORE_READ

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def backend(self) -> MetricsBackend:
        return "embedded"

    @property
    def lag_seconds(self) -> float:
        return 0.0

    def samples_for_jobs(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pa.Table:
        """GPU samples of the given jobs (the caller has already checked visibility)."""
        return samples_for_jobs(self.store, job_ids, since=since, until=until)

    def job_gpus(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        columns: Collection[str] | None = None,
    ) -> JobGpuRead:
        """The raw samples of the jobs: the report weighs each to the next."""
        del columns  # raw samples: every field, the report folds what it needs
        table = samples_for_jobs(self.store, job_ids, since=since, until=until)
        return JobGpuRead(STORE_READ, samples=table)

    def jobs_seen(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        job_ids: Sequence[str] | None = None,
    ) -> list[str]:
        """The rollups' jobs of the window's whole minutes, the raw samples' for the rest
        (:func:`hpcscope.store.rollups.jobs_in_window`)."""
        return rollups.jobs_in_window(self.store, since=since, until=until, job_ids=job_ids)

    def latest(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        del columns  # every column: one scan of the window's rows either way
        # the newest time per GPU by GROUP BY, then its rows (job copies): a third of the time
        # of a window function sorting every row of the window (``QUALIFY ... OVER``)
        where = Where().window(since, until)
        return self.store.query(
            f"SELECT * FROM gpu_samples {where.sql()} {'AND' if where.clauses else 'WHERE'} "
            f"(node, gpu, ts) IN (SELECT (node, gpu, max(ts)) FROM gpu_samples {where.sql()} "
            "GROUP BY node, gpu)",
            [*where.params, *where.params],
        )

    def last_seen(self, *, since: datetime) -> dict[tuple[str, int], datetime]:
        return diagram.last_sample_times(self.store, since=since)

    def gpu_time(
        self,
        job_ids: Sequence[str] | None,
        *,
        since: datetime,
        until: datetime,
        max_interval_seconds: float,
    ) -> GpuTime:
        """The diagram's GPU time, in SQL (:func:`hpcscope.store.diagram.gpu_time`)."""
        return diagram.gpu_time(
            self.store,
            scope=JobScope(all_jobs=True),
            since=since,
            until=until,
            max_interval_seconds=max_interval_seconds,
            job_ids=job_ids,
        )

    def idle_gpu_samples(self, *, since: datetime, until: datetime) -> pa.Table:
        return telemetry_queries.gpu_samples(self.store, since=since, until=until)

    def xid_counts(self, *, since: datetime, until: datetime) -> pa.Table:
        return node_facts.xid_counts(self.store, since=since, until=until)

    def gpu_timeseries(
        self,
        job_ids: Sequence[str],
        *,
        bucket_seconds: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> TimeseriesRead:
        """Whole minutes from the 1-minute rollups (``bucket_seconds`` a multiple of 60, when
        the jobs have rollups), other buckets from raw samples."""
        if bucket_seconds % 60 == 0:
            table = rollups.rollup_timeseries_of(
                self.store, job_ids, bucket_seconds=bucket_seconds, since=since, until=until
            )
            if table.num_rows:
                return TimeseriesRead(table, ReadSource("embedded", "store", 60.0))
        table = timeseries_of_jobs(
            self.store, job_ids, bucket_seconds=bucket_seconds, since=since, until=until
        )
        return TimeseriesRead(table, STORE_READ)


def collected_until(store: Store) -> dict[str, datetime]:
    """Per target, the latest moment its collection is accounted for: its last successful
    scrape, its node's last stored GPU sample (dcgm targets), or the end of its last recorded
    gap, whichever is latest. The collector seeds its gap tracking with this at start, so an
    outage of the collector itself becomes a gap. The samples count because a process killed
    between two writes may have committed a round's samples but not its ``scrapes`` rows."""
    rows = store.query(
        "WITH nodes AS (SELECT DISTINCT target, node FROM scrapes "
        "               WHERE exporter = 'dcgm' AND node IS NOT NULL), "
        "last_sample AS (SELECT node, max(ts) AS ts FROM gpu_samples "
        "                WHERE node IN (SELECT node FROM nodes) GROUP BY node) "
        "SELECT target, max(ts) AS until FROM ("
        "  SELECT target, ts FROM scrapes WHERE ok "
        "  UNION ALL SELECT target, end_ts AS ts FROM collection_gaps "
        "  UNION ALL SELECT n.target, l.ts FROM nodes n JOIN last_sample l USING (node)"
        ") GROUP BY target"
    ).to_pylist()
    return {row["target"]: row["until"] for row in rows}
