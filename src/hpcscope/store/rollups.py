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
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from hpcscope.model.schemas import ROLLUP_METRICS
from hpcscope.store.migrations import ROLLUP_SELECT

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
    con: duckdb.DuckDBPyConnection, *, cutoff: datetime, boundary: datetime | None
) -> datetime | None:
    """Finalise every minute ``m <= cutoff``: compact its partial rows into one final row.

    Args:
        con: the writer's connection.
        cutoff: watermark (or clock) minus 60 s and the grace.
        boundary: the store's final boundary so far.

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
        f"{FOLD_SELECT}, TRUE AS final FROM gpu_rollups_1m WHERE {due}GROUP BY ALL",
        params,
    )
    con.execute(f"DELETE FROM gpu_rollups_1m WHERE {due}", params)
    con.execute("INSERT INTO gpu_rollups_1m SELECT * FROM _rollup_due")
    con.execute("DROP TABLE _rollup_due")
    return new


def initial_boundary(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The final boundary of a store just opened: after its newest final minute."""
    value = con.execute("SELECT max(minute) FROM gpu_rollups_1m WHERE final").fetchall()
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


def rollup_time_range(store: Store, job_id: str) -> tuple[datetime | None, datetime | None]:
    """First and last sample time of a job according to its rollups."""
    row = store.query(
        "SELECT min(first_ts) AS first, max(last_ts) AS last FROM gpu_rollups_1m WHERE job_id = ?",
        [job_id],
    ).to_pylist()[0]
    return row["first"], row["last"]


def job_rollups(store: Store, job_id: str) -> pa.Table:
    """The per-job minutes of ``job_rollups_1m`` (all GPUs of the job folded), oldest first."""
    return store.query("SELECT * FROM job_rollups_1m WHERE job_id = ? ORDER BY minute", [job_id])
