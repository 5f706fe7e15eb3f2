"""The cold tier: raw samples past their retention, as Parquet files DuckDB still reads.

The retention pass (``service/jobs/retention.py``) used to delete the raw samples of summarised
jobs older than ``raw_retention_days``. It now moves them: in one write transaction it copies
them to ``<store>.cold/day=YYYY-MM-DD/part-<uuid>.parquet`` (zstd, one directory per UTC day of
the samples, hive-partitioned), records each part in ``cold_parts`` (migration 19), and deletes
them from the table; if the copy fails nothing is deleted. Rows keep the columns of
``gpu_readings`` (a shared GPU's further jobs in ``shared_job_ids``).

Reads of raw samples for given jobs (:func:`cold_samples`) scan the Parquet files of the days
their window touches, so a job page zooms into a month-old job's seconds as it zooms into
today's; its report still comes from its kept summary. What the cold tier does not hold either
(a site that deletes old Parquet files, a store before migration 19 whose samples were deleted)
is "out of retention" on the job page, never zero.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from hpcscope.store.readings import SHARED_JOB_IDS

if TYPE_CHECKING:
    from hpcscope.store.duck import Store

COLD_PARTS = "cold_parts"

COLD_DDL = f"""
CREATE TABLE {COLD_PARTS} (
    day DATE NOT NULL,
    path VARCHAR NOT NULL,
    rows BIGINT NOT NULL,
    first_ts TIMESTAMP,
    last_ts TIMESTAMP,
    written_at TIMESTAMP NOT NULL
);
"""
"""Migration 19: one row per Parquet part the retention pass wrote."""


def cold_dir(store_path: str) -> Path | None:
    """Where a store's cold tier lives: ``<store>.cold`` beside it (None in memory)."""
    return None if store_path == ":memory:" else Path(f"{store_path}.cold")


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def move_to_cold(
    con: duckdb.DuckDBPyConnection,
    table: str,
    *,
    where: str,
    params: Sequence[object],
    directory: Path,
    now: datetime,
) -> int:
    """Copy the rows of ``table`` matching ``where`` to the cold tier, record the parts, delete
    the rows; inside the caller's transaction. Returns the number of rows moved."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _cold AS SELECT *, CAST(ts AS DATE) AS day "
        f"FROM {table} WHERE {where}",
        list(params),
    )
    days = con.execute(
        "SELECT day, count(*), min(ts), max(ts) FROM _cold GROUP BY day ORDER BY day"
    ).fetchall()
    moved = 0
    batch = uuid.uuid4().hex
    for day, rows, first, last in days:
        part = directory / f"day={day.isoformat()}" / f"part-{batch}.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        con.execute(
            f"COPY (SELECT * EXCLUDE (day) FROM _cold WHERE day = ? ORDER BY node, gpu, ts) "
            f"TO {_quoted(part)} (FORMAT parquet, COMPRESSION zstd)",
            [day],
        )
        con.execute(
            f"INSERT INTO {COLD_PARTS} VALUES (?, ?, ?, ?, ?, ?)",
            [day, str(part), rows, first, last, now],
        )
        moved += int(rows)
    if moved:
        con.execute(f"DELETE FROM {table} WHERE {where}", list(params))
    con.execute("DROP TABLE _cold")
    return moved


def has_cold(store: Store) -> bool:
    """Whether the store has a cold tier with any part."""
    directory = cold_dir(store.path)
    return directory is not None and directory.is_dir() and any(directory.glob("day=*/*.parquet"))


def _days(since: datetime | None, until: datetime | None, directory: Path) -> list[Path]:
    parts = sorted(directory.glob("day=*/*.parquet"))
    if since is None and until is None:
        return parts
    first = (since or datetime.min).date()
    last = (until or datetime.max - timedelta(days=1)).date()
    chosen = []
    for part in parts:
        day = datetime.strptime(part.parent.name.removeprefix("day="), "%Y-%m-%d").date()
        if first <= day <= last:
            chosen.append(part)
    return chosen


def cold_samples(
    store: Store,
    job_ids: Sequence[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    columns: str = "*",
) -> pa.Table | None:
    """The cold tier's ``gpu_samples`` rows (one per GPU, time and job, as the view) of
    ``job_ids`` in ``[since, until]``; None when there is no part for the window."""
    directory = cold_dir(store.path)
    if directory is None or not directory.is_dir() or not job_ids:
        return None
    parts = _days(since, until, directory)
    if not parts:
        return None
    files = "[" + ", ".join(_quoted(p) for p in parts) + "]"
    clauses = [f"job_id IN ({', '.join('?' for _ in job_ids)})"]
    params: list[object] = list(job_ids)
    if since is not None:
        clauses.append("ts >= ?")
        params.append(since)
    if until is not None:
        clauses.append("ts <= ?")
        params.append(until)
    source = f"read_parquet({files}, union_by_name = true)"
    # the view's shape: a shared GPU's reading once per job (store/readings.py)
    rows = (
        f"SELECT * EXCLUDE ({SHARED_JOB_IDS}) FROM {source} UNION ALL BY NAME "
        f"SELECT * EXCLUDE (job_id, {SHARED_JOB_IDS}), unnest({SHARED_JOB_IDS}) AS job_id "
        f"FROM {source} WHERE {SHARED_JOB_IDS} IS NOT NULL"
    )
    return store.query(f"SELECT {columns} FROM ({rows}) WHERE {' AND '.join(clauses)}", params)


def cold_time_ranges(
    store: Store, windows: Mapping[str, tuple[datetime | None, datetime | None]]
) -> dict[str, tuple[datetime, datetime]]:
    """First and last time of the cold tier's rows of each job of ``windows`` within its own
    ``[since, until]`` (what :func:`cold_samples` of that job alone and its window gives as
    ``min(ts), max(ts)``), in one scan of the parts of the days any window touches: a part
    holds one day of ``ts``, so a job's rows in its window lie in its own days' parts. A job
    without such rows is not in the answer."""
    directory = cold_dir(store.path)
    if directory is None or not directory.is_dir() or not windows:
        return {}
    parts = sorted({p for since, until in windows.values() for p in _days(since, until, directory)})
    if not parts:
        return {}
    files = "[" + ", ".join(_quoted(p) for p in parts) + "]"
    source = f"read_parquet({files}, union_by_name = true)"
    ids = list(windows)
    among = f"job_id IN ({', '.join('?' for _ in ids)})"
    rows = (
        f"SELECT job_id, ts FROM {source} WHERE {among} UNION ALL BY NAME "
        f"SELECT job_id, ts FROM (SELECT ts, unnest({SHARED_JOB_IDS}) AS job_id "
        f"FROM {source} WHERE {SHARED_JOB_IDS} IS NOT NULL) WHERE {among}"
    )
    bounds = pa.table(
        {
            "job_id": pa.array(ids, pa.string()),
            "since": pa.array([windows[i][0] for i in ids], pa.timestamp("us")),
            "until": pa.array([windows[i][1] for i in ids], pa.timestamp("us")),
        }
    )
    found = store.query(
        f"SELECT r.job_id, min(r.ts) AS first, max(r.ts) AS last FROM ({rows}) r "
        "JOIN cold_windows w ON w.job_id = r.job_id "
        "WHERE (w.since IS NULL OR r.ts >= w.since) AND (w.until IS NULL OR r.ts <= w.until) "
        "GROUP BY r.job_id",
        [*ids, *ids],
        tables={"cold_windows": bounds},
    )
    return {
        str(row["job_id"]): (row["first"], row["last"])
        for row in found.to_pylist()
        if row["first"] is not None
    }


__all__ = [
    "COLD_DDL",
    "COLD_PARTS",
    "cold_dir",
    "cold_samples",
    "cold_time_ranges",
    "has_cold",
    "move_to_cold",
]
