"""1-minute rollups of ``gpu_samples``, maintained incrementally as samples arrive.

``gpu_rollups_1m`` holds, per (minute, GPU, job), the sample count and, per metric of
:data:`~hpcscope.model.schemas.ROLLUP_METRICS`, min, mean, max and the count of known values
(a mean over several rows is weighted by that count, so it equals the mean of the raw samples).
``job_rollups_1m`` is a view that folds the GPUs of a job into one row per minute.

**Incremental.** Each append of samples is aggregated alone, per (minute, GPU, job), and its
rows are appended as *partial* rows of the minutes it touched (``final`` false), in the
append's own transaction: neither the history nor the earlier samples of the minute are read
again. Readers fold partial rows (:func:`gpu_minutes`; min of mins, max of maxes, means weighted
by counts). When a minute becomes final its partial rows are compacted into one row per
(minute, GPU, job): about once a minute, not once a scrape.

**Finalisation rule.** The *watermark* is the newest sample time of an append. A minute
``[m, m + 60 s)`` is final once the watermark reaches ``m + 60 s + rollup_grace_seconds``
(default 120 s: a scrape that started in the minute and was stored up to two minutes later
still counts), or once the retention pass finalises minutes older than the same bound measured
on the clock (when collection stopped and no watermark moves). Finality only moves forward:
every minute before the store's *final boundary* is final, none after it. A final minute is
never rewritten: a sample that lands in it later is kept raw but not folded into the rollup (it
cannot be: retention may already have dropped the raw samples the rollup was made of).

**Pending** (migration 17). An INSERT of partial rows per scrape round cost more than the rest
of the append (2,048 rows x 33 columns each second at 1,024 GPUs); the rows of a minute are
now written once, from the raw samples, when the minute has closed. ``rollup_state`` holds
``pending_from``, a minute start: every raw sample at or after it is not yet in the rollup
rows (``gpu_rollup_rows``), every sample before it is (or lies in a final minute). The view
``gpu_rollups_1m`` is those rows plus the aggregate of the raw samples since
``pending_from``, so readers see what the per-append rows gave, open minutes included. An
append moves ``pending_from`` to the minute of ``watermark - FLUSH_SLACK_SECONDS`` (inserting
the partial rows of the minutes it passes, from ``gpu_samples``) and writes partial rows for
its own samples before ``pending_from`` at once (late samples of a closed, not final, minute:
rare). Finalisation first moves ``pending_from`` to the new boundary. Nothing is held in
memory: after a crash the committed raw samples and ``pending_from`` are the state, in the
same transactions. Stores before migration 17 keep the per-append rows (:func:`update_minutes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from hpcscope.model.sampling import has_job_sql
from hpcscope.model.schemas import ROLLUP_METRICS
from hpcscope.store.filters import Where
from hpcscope.store.migrations import ROLLUP_ROWS, ROLLUP_SELECT, ROLLUP_STATE
from hpcscope.store.readings import by_job
from hpcscope.store.time_ranges import job_time_ranges

if TYPE_CHECKING:
    from hpcscope.store.duck import Store

_KEYS = "minute, node, gpu, gpu_instance_id, job_id"

#: Folds rows of the same (minute, GPU, job) into one (partial rows, or any subset of them).
FOLD_SELECT = (
    f"{_KEYS}, sum(samples)::BIGINT AS samples, min(first_ts) AS first_ts, "
    "max(last_ts) AS last_ts, "
    + ", ".join(
        f"min({name}_min) AS {name}_min, "
        f"sum({name}_mean * {name}_count) / nullif(sum({name}_count), 0) AS {name}_mean, "
        f"max({name}_max) AS {name}_max, sum({name}_count)::BIGINT AS {name}_count"
        for name, _ in ROLLUP_METRICS
    )
)

_MINUTE = timedelta(minutes=1)

#: Seconds past a minute's end before the watermark closes it (a round's pages straddle it).
FLUSH_SLACK_SECONDS = 5.0


def _floor_minute(value: datetime) -> datetime:
    return value.replace(second=0, microsecond=0)


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    rows = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND NOT temporary", [name]
    ).fetchall()
    return bool(rows[0][0])


def rollup_table(con: duckdb.DuckDBPyConnection) -> str:
    """The table of rollup rows: ``gpu_rollup_rows``, or ``gpu_rollups_1m`` before migration 17."""
    return ROLLUP_ROWS if _table_exists(con, ROLLUP_ROWS) else "gpu_rollups_1m"


def has_pending(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store keeps open minutes raw (migration 17, module docstring)."""
    return _table_exists(con, ROLLUP_STATE)


def pending_from(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The stored ``pending_from`` (None: no rollup row nor pending sample yet)."""
    rows = con.execute(f"SELECT max(pending_from) FROM {ROLLUP_STATE}").fetchall()
    value = rows[0][0] if rows else None
    return value if isinstance(value, datetime) else None


def _set_pending(con: duckdb.DuckDBPyConnection, value: datetime) -> None:
    con.execute(f"DELETE FROM {ROLLUP_STATE}")
    con.execute(f"INSERT INTO {ROLLUP_STATE} VALUES (?)", [value])


def flush_pending(con: duckdb.DuckDBPyConnection, *, pending: datetime, upto: datetime) -> datetime:
    """Write the partial rows of the raw samples in ``[pending, upto)``; the new ``pending``."""
    if upto <= pending:
        return pending
    con.execute(
        f"INSERT INTO {ROLLUP_ROWS} SELECT {ROLLUP_SELECT}, FALSE AS final "
        "FROM gpu_samples s WHERE s.ts >= ? AND s.ts < ? GROUP BY ALL",
        [pending, upto],
    )
    _set_pending(con, upto)
    return upto


def update_pending(
    con: duckdb.DuckDBPyConnection,
    incoming: pa.Table,
    *,
    grace_seconds: float,
    boundary: datetime | None,
    pending: datetime | None,
) -> tuple[datetime | None, datetime | None]:
    """The rollup step of an append to a store at migration 17 (module docstring, "Pending").

    Args:
        con: the writer's connection, inside the append's transaction (the samples inserted).
        incoming: the appended rows (``gpu_readings`` rows or ``gpu_samples`` rows).
        grace_seconds: the finalisation grace.
        boundary: the store's final boundary (None: nothing is final yet).
        pending: the stored ``pending_from``.

    Returns:
        The new final boundary and ``pending_from``.
    """
    ts = incoming.column("ts")
    bounds = pc.min_max(ts).as_py()
    oldest, watermark = bounds["min"], bounds["max"]
    if oldest is None or watermark is None:
        return boundary, pending
    if pending is None:
        pending = _floor_minute(oldest)
        if boundary is not None and boundary > pending:
            pending = boundary
        _set_pending(con, pending)
    elif oldest < pending:  # late samples of closed minutes: partial rows now, as before
        rollup_late = by_job(incoming.filter(pc.less(ts, pa.scalar(pending, ts.type))))  # noqa: F841
        late = "" if boundary is None else "WHERE s.ts >= ? "
        con.execute(
            f"INSERT INTO {ROLLUP_ROWS} SELECT {ROLLUP_SELECT}, FALSE AS final "
            f"FROM rollup_late s {late}GROUP BY ALL",
            [] if boundary is None else [boundary],
        )
    closed = _floor_minute(watermark - timedelta(seconds=FLUSH_SLACK_SECONDS))
    pending = flush_pending(con, pending=pending, upto=closed)
    cutoff = watermark - timedelta(seconds=60 + grace_seconds)
    return finalise_pending(con, cutoff=cutoff, boundary=boundary, pending=pending)


def finalise_pending(
    con: duckdb.DuckDBPyConnection,
    *,
    cutoff: datetime,
    boundary: datetime | None,
    pending: datetime | None,
) -> tuple[datetime | None, datetime | None]:
    """:func:`finalise_before` for a store at migration 17: the raw samples of the minutes
    becoming final are written as partial rows first. Returns the boundary and ``pending_from``."""
    new = final_boundary(cutoff)
    if boundary is not None and new <= boundary:
        return boundary, pending
    if pending is None:
        _set_pending(con, new)
        pending = new
    else:
        pending = flush_pending(con, pending=pending, upto=new)
    return finalise_before(con, cutoff=cutoff, boundary=boundary, table=ROLLUP_ROWS), pending


def final_boundary(cutoff: datetime) -> datetime:
    """The first minute that is not final when minutes up to ``cutoff`` are
    (``cutoff`` = watermark - 60 s - grace): every minute ``m <= cutoff`` is final."""
    return cutoff.replace(second=0, microsecond=0) + _MINUTE


def update_minutes(
    con: duckdb.DuckDBPyConnection,
    incoming: pa.Table,
    *,
    grace_seconds: float,
    boundary: datetime | None,
) -> datetime | None:
    """Append the rollup rows of ``incoming``; finalise (compact) the minutes now due.

    Runs on the writer's connection, inside the append's transaction.

    Args:
        con: the writer's connection.
        incoming: the appended ``gpu_samples`` rows.
        grace_seconds: the finalisation grace of the module docstring.
        boundary: the store's final boundary (None: nothing is final yet).

    Returns:
        The new final boundary.
    """
    rollup_incoming = incoming  # noqa: F841  (DuckDB replacement scan)
    late = "" if boundary is None else "WHERE s.ts >= ? "  # final minutes take no sample
    con.execute(
        f"INSERT INTO gpu_rollups_1m SELECT {ROLLUP_SELECT}, FALSE AS final "
        f"FROM rollup_incoming s {late}GROUP BY ALL",
        [] if boundary is None else [boundary],
    )
    watermark = pc.max(incoming.column("ts")).as_py()
    cutoff = watermark - timedelta(seconds=60 + grace_seconds)
    return finalise_before(con, cutoff=cutoff, boundary=boundary)


def finalise_before(
    con: duckdb.DuckDBPyConnection,
    *,
    cutoff: datetime,
    boundary: datetime | None,
    table: str = "gpu_rollups_1m",
) -> datetime | None:
    """Finalise every minute ``m <= cutoff``: compact its partial rows into one final row.

    Args:
        con: the writer's connection.
        cutoff: watermark (or clock) minus 60 s and the grace.
        boundary: the store's final boundary so far.
        table: the table of rollup rows (:func:`rollup_table`).

    Returns:
        The new final boundary (never earlier than ``boundary``).
    """
    new = final_boundary(cutoff)
    if boundary is not None and new <= boundary:
        return boundary
    lower = "" if boundary is None else "AND minute >= ? "
    params: list[object] = [new] if boundary is None else [new, boundary]
    due = f"NOT final AND minute < ? {lower}"
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _rollup_due AS SELECT "
        f"{FOLD_SELECT}, TRUE AS final FROM {table} WHERE {due}GROUP BY ALL",
        params,
    )
    con.execute(f"DELETE FROM {table} WHERE {due}", params)
    con.execute(f"INSERT INTO {table} SELECT * FROM _rollup_due")
    con.execute("DROP TABLE _rollup_due")
    return new


def initial_boundary(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The final boundary of a store just opened: after its newest final minute."""
    table = rollup_table(con)
    value = con.execute(f"SELECT max(minute) FROM {table} WHERE final").fetchall()
    newest = value[0][0] if value else None
    return newest + _MINUTE if isinstance(newest, datetime) else None


def gpu_minutes(store: Store, *, job_id: str | None = None) -> pa.Table:
    """One row per (minute, GPU, job) with its partial rows folded, oldest first."""
    where, params = ("WHERE job_id = ? ", [job_id]) if job_id is not None else ("", [])
    return store.query(
        f"SELECT {FOLD_SELECT}, bool_and(final) AS final FROM gpu_rollups_1m {where}"
        "GROUP BY ALL ORDER BY minute, node, gpu, gpu_instance_id, job_id",
        params,
    )


# ---------------------------------------------------------------------- reads


def rollup_timeseries(store: Store, job_id: str, *, bucket_seconds: int) -> pa.Table:
    """Per GPU of a job, mean reported and real efficiency per bucket, from the rollups.

    ``bucket_seconds`` must be a multiple of 60: then every minute falls inside one bucket and
    the result equals :func:`hpcscope.store.reports.gpu_timeseries` over the raw samples.
    """
    if bucket_seconds % 60:
        raise ValueError(f"rollup buckets are whole minutes, not {bucket_seconds} s")
    means = ", ".join(
        f"sum({name}_mean * {name}_count) / nullif(sum({name}_count), 0) AS {name}"
        for name in ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio")
    )
    return store.query(
        f"SELECT time_bucket(INTERVAL '{int(bucket_seconds)} seconds', minute) AS bucket, "
        f"node, gpu, {means} FROM gpu_rollups_1m WHERE job_id = ? "
        "GROUP BY ALL ORDER BY bucket, node, gpu",
        [job_id],
    )


def rollup_timeseries_of(
    store: Store,
    job_ids: Sequence[str],
    *,
    bucket_seconds: int,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """Per job GPU, mean reported, real and tensor activity per bucket (whole minutes) from
    the rollups: ``bucket``, ``job_id``, ``node``, ``gpu`` and the three means."""
    if bucket_seconds % 60:
        raise ValueError(f"rollup buckets are whole minutes, not {bucket_seconds} s")
    means = ", ".join(
        f"sum({name}_mean * {name}_count) / nullif(sum({name}_count), 0) AS {name}"
        for name in ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio")
    )
    where = Where().among("job_id", list(job_ids)).window(since, until, column="minute")
    return store.query(
        f"SELECT time_bucket(INTERVAL '{int(bucket_seconds)} seconds', minute) AS bucket, "
        f"job_id, node, gpu, {means} FROM gpu_rollups_1m {where.sql()} "
        "GROUP BY ALL ORDER BY bucket, job_id, node, gpu",
        where.params,
    )


def rollup_time_range(store: Store, job_id: str) -> tuple[datetime | None, datetime | None]:
    """First and last sample time of a job according to its rollups."""
    row = store.query(
        "SELECT min(first_ts) AS first, max(last_ts) AS last FROM gpu_rollups_1m WHERE job_id = ?",
        [job_id],
    ).to_pylist()[0]
    return row["first"], row["last"]


def rollup_time_ranges(
    store: Store, job_ids: Sequence[str]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """:func:`rollup_time_range` of each of ``job_ids``, in one query."""
    return job_time_ranges(
        store,
        "SELECT job_id, min(first_ts) AS first, max(last_ts) AS last FROM gpu_rollups_1m",
        job_ids,
        grouped=True,
    )


def job_rollups(store: Store, job_id: str) -> pa.Table:
    """The per-job minutes of ``job_rollups_1m`` (all GPUs of the job folded), oldest first."""
    return store.query("SELECT * FROM job_rollups_1m WHERE job_id = ? ORDER BY minute", [job_id])


def _has_table(store: Store, name: str) -> bool:
    found = store.query(
        "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = ? AND NOT temporary", [name]
    ).to_pylist()
    return bool(found[0]["n"])


def jobs_in_window(
    store: Store,
    *,
    since: datetime,
    until: datetime | None,
    job_ids: Sequence[str] | None = None,
) -> list[str]:
    """Job ids with a GPU sample in ``[since, until]`` (only those of ``job_ids`` when given),
    sorted.

    The jobs of the rollup rows of the whole minutes inside the window (one row per minute,
    GPU and job: a day of 1,024 GPUs at 1 s is 1.5 M rows, not 88 M samples), then the raw
    samples of the window for any other job (the minutes at both ends, those not rolled up
    yet, samples that came too late for their minute's rollup). A job with a rollup row in a
    whole minute counts, also once retention dropped that minute's raw samples."""
    has_job = has_job_sql("job_id")
    known: list[str] = []
    first = _floor_minute(since) + (_MINUTE if _floor_minute(since) < since else timedelta())
    end = _floor_minute(until) if until is not None else None
    whole_minutes = end is None or first < end
    if whole_minutes and _has_table(store, ROLLUP_ROWS):
        rolled = Where().among("job_id", job_ids).window(first, None, column="minute")
        if end is not None:
            rolled.clauses.append("minute < ?")
            rolled.params.append(end)
        rolled.clauses.append(has_job)
        rows = store.query(
            f"SELECT DISTINCT job_id FROM {ROLLUP_ROWS} {rolled.sql()}", rolled.params
        )
        known = [str(v) for v in rows.column("job_id").to_pylist()]
    raw = Where().among("job_id", job_ids).window(since, until)
    raw.clauses.append(has_job)
    if known:
        raw.clauses.append(f"job_id NOT IN ({', '.join('?' for _ in known)})")
        raw.params.extend(known)
    rows = store.query(f"SELECT DISTINCT job_id FROM gpu_samples {raw.sql()}", raw.params)
    return sorted({*known, *(str(v) for v in rows.column("job_id").to_pylist())})
