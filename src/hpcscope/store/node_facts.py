"""Xid counts and node posture (migration 16): what GM-4 and the posture rules read.

``gpu_xid_counts`` is append-only, one row per Xid series per scrape. ``node_posture`` keeps
each check's facts once (``node, checked_at, kind, name``): node_exporter serves the same
textfile at every scrape until the next daily check, and only the first read of a check is
stored.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA, NODE_POSTURE_SCHEMA

if TYPE_CHECKING:  # the migrations import this module's DDL before ``duck`` exists
    from hpcscope.store.duck import Store

NODE_FACTS_DDL = """
CREATE TABLE gpu_xid_counts (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    job_id VARCHAR,
    xid INTEGER NOT NULL,
    xid_count DOUBLE NOT NULL
);
CREATE INDEX gpu_xid_counts_ts ON gpu_xid_counts (ts);
CREATE TABLE node_posture (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    checked_at TIMESTAMP NOT NULL,
    kind VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    value VARCHAR NOT NULL,
    detail VARCHAR,
    PRIMARY KEY (node, checked_at, kind, name)
);
"""


def append_xid_counts(store: Store, rows: pa.Table) -> Future[int]:
    """Append Xid count rows (:data:`GPU_XID_COUNT_SCHEMA`); returns the number written."""
    table = rows.select(GPU_XID_COUNT_SCHEMA.names).cast(GPU_XID_COUNT_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_xids = table  # noqa: F841  (read by DuckDB's replacement scan)
        con.execute("INSERT INTO gpu_xid_counts BY NAME SELECT * FROM incoming_xids")
        return int(table.num_rows)

    return store.submit_write(write)


def append_posture(store: Store, rows: pa.Table) -> Future[int]:
    """Store posture facts (:data:`NODE_POSTURE_SCHEMA`) of checks not stored yet; returns the
    number of rows written."""
    table = rows.select(NODE_POSTURE_SCHEMA.names).cast(NODE_POSTURE_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_posture = table  # noqa: F841  (read by DuckDB's replacement scan)
        result = con.execute(
            "INSERT INTO node_posture BY NAME "
            "SELECT DISTINCT ON (node, checked_at, kind, name) * FROM incoming_posture "
            "ON CONFLICT DO NOTHING"
        ).fetchall()
        return int(result[0][0]) if result else 0

    return store.submit_write(write)


def xid_counts(store: Store, *, since: datetime, until: datetime) -> pa.Table:
    """Stored Xid counts with ``since <= ts <= until``, by node, GPU and time."""
    return store.query(
        "SELECT * FROM gpu_xid_counts WHERE ts BETWEEN ? AND ? ORDER BY node, gpu, ts, xid",
        [since, until],
    ).cast(GPU_XID_COUNT_SCHEMA)


def latest_posture(store: Store, *, until: datetime) -> pa.Table:
    """Each node's facts from its latest posture check read by ``until``."""
    return store.query(
        "SELECT p.* FROM node_posture p JOIN ("
        "  SELECT node, max(checked_at) AS checked_at FROM node_posture WHERE ts <= ? "
        "  GROUP BY node) l ON p.node = l.node AND p.checked_at = l.checked_at "
        "WHERE p.ts <= ? ORDER BY p.node, p.kind, p.name",
        [until, until],
    ).cast(NODE_POSTURE_SCHEMA)
