"""InfiniBand port counters: append and read back (``ib_port_counters``, migration 3)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

import duckdb
import pyarrow as pa

from hpcscope.model.schemas import IB_PORT_SCHEMA
from hpcscope.store.duck import Store


def append_ib_counters(store: Store, rows: pa.Table) -> Future[int]:
    """Append port rows (:data:`IB_PORT_SCHEMA`); returns the number written."""
    table = rows.select(IB_PORT_SCHEMA.names).cast(IB_PORT_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_ib = table  # noqa: F841  (read by DuckDB's replacement scan)
        con.execute("INSERT INTO ib_port_counters BY NAME SELECT * FROM incoming_ib")
        return int(table.num_rows)

    return store.submit_write(write)


def ib_counters(
    store: Store,
    *,
    node: str | None = None,
    nodes: Sequence[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """Stored port rows, oldest first, optionally for one node or some nodes, from ``since``
    and up to ``until`` (both inclusive)."""
    clauses: list[str] = []
    params: list[object] = []
    if node is not None:
        clauses.append("node = ?")
        params.append(node)
    if nodes is not None:
        clauses.append("list_contains(?, node)")
        params.append(list(nodes))
    if since is not None:
        clauses.append("ts >= ?")
        params.append(since)
    if until is not None:
        clauses.append("ts <= ?")
        params.append(until)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return store.query(
        f"SELECT * FROM ib_port_counters {where} ORDER BY node, device, port, ts", params
    )
