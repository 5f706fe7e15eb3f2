"""The tables of migration 16 match their Arrow schemas; a posture check is stored once and
the latest check of each node is what the rules read."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA, NODE_POSTURE_SCHEMA
from hpcscope.store import Store
from hpcscope.store import node_facts as queries

T0 = datetime(2026, 12, 1, 12)


def test_tables_match_arrow_schemas(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        for table, schema in (
            ("gpu_xid_counts", GPU_XID_COUNT_SCHEMA),
            ("node_posture", NODE_POSTURE_SCHEMA),
        ):
            stored = store.query(f"SELECT * FROM {table} LIMIT 0").schema
            assert stored.names == schema.names
            for field in schema:
                assert stored.field(field.name).type == field.type, field.name


def _facts(node: str, checked: datetime, ts: datetime, runc: str) -> pa.Table:
    rows = [
        {"ts": ts, "node": node, "checked_at": checked, "kind": "version", "name": "runc",
         "value": runc, "detail": None},
        {"ts": ts, "node": node, "checked_at": checked, "kind": "flag",
         "name": "setuid_apptainer", "value": "0", "detail": None},
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=NODE_POSTURE_SCHEMA)


def test_a_check_is_stored_once_and_the_latest_is_read(tmp_path: Path) -> None:
    morning, next_day = T0 - timedelta(hours=3), T0 + timedelta(hours=21)
    with Store(tmp_path / "s.duckdb") as store:
        for k in range(4):  # node_exporter serves the same file at every scrape
            ts = T0 + timedelta(seconds=15 * k)
            written = queries.append_posture(store, _facts("gpu01", morning, ts, "1.1.11"))
            assert written.result() == (2 if k == 0 else 0)
        queries.append_posture(store, _facts("gpu02", morning, T0, "1.2.8")).result()
        queries.append_posture(store, _facts("gpu01", next_day, next_day, "1.2.8")).result()
        before = queries.latest_posture(store, until=T0 + timedelta(hours=1)).to_pylist()
        assert {(r["node"], r["value"]) for r in before if r["kind"] == "version"} == {
            ("gpu01", "1.1.11"), ("gpu02", "1.2.8")}  # fmt: skip
        after = queries.latest_posture(store, until=next_day).to_pylist()
        assert {(r["node"], r["value"]) for r in after if r["kind"] == "version"} == {
            ("gpu01", "1.2.8"), ("gpu02", "1.2.8")}  # fmt: skip


def test_xid_counts_are_read_by_window(tmp_path: Path) -> None:
    rows = [
        {"ts": T0 + timedelta(seconds=15 * k), "node": "gpu01", "gpu": 3, "job_id": "7",
         "xid": 31, "xid_count": float(k)}
        for k in range(8)
    ]  # fmt: skip
    with Store(tmp_path / "s.duckdb") as store:
        table = pa.Table.from_pylist(rows, schema=GPU_XID_COUNT_SCHEMA)
        assert queries.append_xid_counts(store, table).result() == 8
        read = queries.xid_counts(
            store, since=T0 + timedelta(seconds=30), until=T0 + timedelta(minutes=1)
        )
        assert read.column("xid_count").to_pylist() == [2.0, 3.0, 4.0]
