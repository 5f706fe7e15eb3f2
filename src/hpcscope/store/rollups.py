"""1-minute rollups of ``gpu_samples``, maintained incrementally as samples arrive.

One row of ``gpu_rollups_1m`` per (minute, GPU, job): the sample count and, per metric of
:data:`~hpcscope.model.schemas.ROLLUP_METRICS`, min, mean, max and the count of known values
(a mean over several minutes is weighted by that count, so it equals the mean of the raw
samples). ``job_rollups_1m`` is a view that folds the GPUs of a job into one row per minute.

**Incremental.** Each append of samples recomputes only the minutes it touched, for the GPUs it
touched, from the raw samples of those minutes (in the append's own transaction): never the
whole history.

**Finalisation rule.** The *watermark* is the newest sample time of an append. A minute
``[m, m + 60 s)`` is final once the watermark reaches ``m + 60 s + rollup_grace_seconds``
(default 120 s: a scrape that started in the minute and was stored up to two minutes later
still counts), or once the retention pass finalises minutes older than the same bound measured
on the clock (when collection stopped and no watermark moves). A final minute is never
rewritten: a sample that lands in it later is kept raw but not folded into the rollup (it
cannot be: retention may already have dropped the raw samples the rollup was made of).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from hpcscope.model.schemas import ROLLUP_METRICS
from hpcscope.store.migrations import ROLLUP_SELECT

if TYPE_CHECKING:
    from hpcscope.store.duck import Store

_MATCH = "r.minute = t.minute AND r.node = t.node AND r.gpu = t.gpu"


def update_minutes(
    con: duckdb.DuckDBPyConnection,
    incoming: pa.Table,
    *,
    grace_seconds: float,
    floor: datetime | None,
) -> datetime | None:
    """Recompute the rollups of the minutes ``incoming`` touched; finalise those now due.

    Runs on the writer's connection, inside the append's transaction, after the rows of
    ``incoming`` were inserted into ``gpu_samples``.

    Args:
        con: the writer's connection.
        incoming: the appended ``gpu_samples`` rows.
        grace_seconds: the finalisation grace of the module docstring.
        floor: every rollup row older than this minute is final (None: no row is non-final).

    Returns:
        The new floor, for the next call.
    """
    keys = incoming.select(["ts", "node", "gpu"])  # noqa: F841  (DuckDB replacement scan)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _rollup_touched AS SELECT DISTINCT "
        "time_bucket(INTERVAL '1 minute', ts) AS minute, node, gpu FROM keys"
    )
    bounds = con.execute(
        "SELECT min(minute), max(minute) + INTERVAL '1 minute' FROM _rollup_touched"
    ).fetchall()[0]
    watermark = con.execute("SELECT max(ts) FROM keys").fetchall()[0][0]
    lo, hi = bounds
    # final minutes stay as they are (late samples are kept raw only)
    con.execute(
        "DELETE FROM _rollup_touched t WHERE EXISTS (SELECT 1 FROM gpu_rollups_1m r "
        f"WHERE r.final AND {_MATCH})"
    )
    con.execute(f"DELETE FROM gpu_rollups_1m r USING _rollup_touched t WHERE {_MATCH}")
    con.execute(
        f"INSERT INTO gpu_rollups_1m SELECT {ROLLUP_SELECT}, FALSE AS final FROM gpu_samples s "
        "SEMI JOIN _rollup_touched t ON time_bucket(INTERVAL '1 minute', s.ts) = t.minute "
        "AND s.node = t.node AND s.gpu = t.gpu WHERE s.ts >= ? AND s.ts < ? GROUP BY ALL",
        [lo, hi],
    )
    con.execute("DROP TABLE _rollup_touched")
    cutoff = watermark - timedelta(seconds=60 + grace_seconds)
    return _finalise(con, before=cutoff, floor=floor, lo=lo)


def _finalise(
    con: duckdb.DuckDBPyConnection, *, before: datetime, floor: datetime | None, lo: datetime
) -> datetime | None:
    lower = lo if floor is None else min(floor, lo)
    con.execute(
        "UPDATE gpu_rollups_1m SET final = TRUE WHERE NOT final AND minute >= ? AND minute < ?",
        [lower, before],
    )
    return max(before, lower)


def finalise_before(
    con: duckdb.DuckDBPyConnection, *, before: datetime, floor: datetime | None
) -> datetime | None:
    """Finalise every rollup minute that starts before ``before`` (the clock-based rule)."""
    if floor is None:
        return None
    con.execute(
        "UPDATE gpu_rollups_1m SET final = TRUE WHERE NOT final AND minute >= ? AND minute < ?",
        [floor, before],
    )
    return max(before, floor)


def initial_floor(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The oldest non-final minute of a store just opened (None when all are final)."""
    value = con.execute("SELECT min(minute) FROM gpu_rollups_1m WHERE NOT final").fetchall()
    floor = value[0][0] if value else None
    return floor if isinstance(floor, datetime) else None


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


__all__ = [
    "ROLLUP_METRICS",
    "finalise_before",
    "initial_floor",
    "job_rollups",
    "rollup_time_range",
    "rollup_timeseries",
    "update_minutes",
]
