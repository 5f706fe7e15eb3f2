"""Lustre job_stats: append without duplicates and read back (``lustre_job_stats``, migration 5).

A spool file is read again whenever its server rewrites it, and most of its entries have not
changed: Lustre's ``snapshot_time`` only moves when a job's counters do. So a row is identified
by ``(server, target, job_id_raw, operation, ts)`` and stored once; re-reading a file, or an idle
job in the next snapshot, adds nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from hpcscope.model.schemas import LUSTRE_JOB_STATS_SCHEMA
from hpcscope.store.duck import Store
from hpcscope.store.filters import Where

#: The columns that identify a stored row.
KEY_COLUMNS = ("server", "target", "job_id_raw", "operation", "ts")

_SAME_KEY = " AND ".join(f"s.{c} IS NOT DISTINCT FROM i.{c}" for c in KEY_COLUMNS)


def append_job_stats(store: Store, table: pa.Table) -> Future[int]:
    """Append rows of :data:`LUSTRE_JOB_STATS_SCHEMA` that are not stored yet.

    Rows whose key (:data:`KEY_COLUMNS`) is already stored, or repeats within ``table``, are
    skipped.

    Returns:
        A future with the number of rows actually written.
    """
    rows = _rows([table])
    return store.submit_write(lambda con: sum(_insert_new(con, rows).values()))


def append_job_stats_by_server(store: Store, tables: Sequence[pa.Table]) -> Future[dict[str, int]]:
    """:func:`append_job_stats` of several tables (a spool's changed files) in one write.

    One write, not one per file: each write waits its turn on the store's writer thread behind
    the other writes, so a cycle's files wait once, not once per file (16 at 128 nodes).

    Returns:
        A future with the number of rows actually written per server (a server with none
        written is absent).
    """
    rows = _rows(tables)
    return store.submit_write(lambda con: _insert_new(con, rows))


def _rows(tables: Sequence[pa.Table]) -> pa.Table:
    parts = [t.select(LUSTRE_JOB_STATS_SCHEMA.names).cast(LUSTRE_JOB_STATS_SCHEMA) for t in tables]
    return pa.concat_tables(parts) if parts else LUSTRE_JOB_STATS_SCHEMA.empty_table()


def _insert_new(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> dict[str, int]:
    """Insert the rows of ``rows`` not stored yet; how many per server (writer thread)."""
    if rows.num_rows == 0:
        return {}
    first = pc.min(rows["ts"]).as_py()
    last = pc.max(rows["ts"]).as_py()
    servers = sorted(set(rows["server"].to_pylist()))
    incoming_lustre = rows  # noqa: F841  (read by DuckDB's replacement scan)
    # compare only with stored rows of the same servers and time span: the ts zone maps
    # keep this from scanning the whole table as it grows
    result = con.execute(
        f"""
        INSERT INTO lustre_job_stats BY NAME
        WITH stored AS (
            SELECT {", ".join(KEY_COLUMNS)} FROM lustre_job_stats
            WHERE ts BETWEEN ? AND ? AND list_contains(?, server)
        ),
        fresh AS (
            SELECT DISTINCT ON ({", ".join(KEY_COLUMNS)}) * FROM incoming_lustre
        )
        SELECT i.* FROM fresh i
        WHERE NOT EXISTS (SELECT 1 FROM stored s WHERE {_SAME_KEY})
        RETURNING server
        """,
        [first, last, servers],
    ).fetchall()
    return dict(Counter(str(server) for (server,) in result))


def job_stats(
    store: Store,
    *,
    job_ids: Sequence[str] | None = None,
    hosts: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    operations: Sequence[str] | None = None,
) -> pa.Table:
    """Stored job_stats rows, ordered by server, target, job_id_raw, operation, ts.

    Args:
        job_ids: keep rows of these Slurm job ids (the extracted ``job_id``, not the raw id).
        hosts: keep rows whose jobid names one of these client hosts (``jobid_name`` with
            ``%H``).
        since: keep snapshots at or after this time (naive UTC).
        until: keep snapshots at or before this time (naive UTC).
        operations: keep rows of these operations (``read_bytes``, ``getattr``, ...).

    Returns:
        A table of :data:`LUSTRE_JOB_STATS_SCHEMA`.
    """
    where = (
        Where()
        .among("job_id", job_ids)
        .among("host", hosts)
        .among("operation", operations)
        .window(since, until)
    )
    columns = ", ".join(LUSTRE_JOB_STATS_SCHEMA.names)
    table = store.query(
        f"SELECT {columns} FROM lustre_job_stats {where.sql()} "
        "ORDER BY server, target NULLS FIRST, job_id_raw, operation, ts",
        where.params,
    )
    return table.cast(LUSTRE_JOB_STATS_SCHEMA)
