"""InfiniBand port counters: append and read back (``ib_port_counters``, migration 3)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

import duckdb
import pyarrow as pa

from hpcscope.model.schemas import IB_PORT_SCHEMA
from hpcscope.store.duck import Store
from hpcscope.store.filters import Where


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
    where = Where().equals("node", node).among("node", nodes).window(since, until)
    return store.query(
        f"SELECT * FROM ib_port_counters {where.sql()} ORDER BY node, device, port, ts",
        where.params,
    )


def ib_rows_per_slot(
    store: Store, *, after: datetime, before: datetime, slot_seconds: float
) -> dict[int, int]:
    """Port rows stored with ``after < ts < before``, by scrape slot (``floor(epoch seconds /
    slot_seconds)``): how the telemetry rules see that rows arrived behind what they read."""
    rows = store.query(
        "SELECT floor(epoch_us(ts) / ?)::BIGINT AS slot, count(*) AS n FROM ib_port_counters "
        "WHERE ts > ? AND ts < ? GROUP BY slot",
        [slot_seconds * 1e6, after, before],
    ).to_pylist()
    return {int(r["slot"]): int(r["n"]) for r in rows}
