"""The tables of migration 13 match their Arrow schemas; changelog records are stored once."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa

from hpcscope.model.schemas import GPU_PROCESS_SCHEMA, LUSTRE_CHANGELOG_SCHEMA
from hpcscope.store import Store
from hpcscope.store import telemetry_rules as queries


def test_tables_match_arrow_schemas(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        for table, schema in (
            ("lustre_changelog", LUSTRE_CHANGELOG_SCHEMA),
            ("gpu_processes", GPU_PROCESS_SCHEMA),
        ):
            stored = store.query(f"SELECT * FROM {table} LIMIT 0").schema
            assert stored.names == schema.names
            for field in schema:
                assert stored.field(field.name).type == field.type, field.name


def test_changelog_records_are_stored_once(tmp_path: Path) -> None:
    row = dict.fromkeys(LUSTRE_CHANGELOG_SCHEMA.names) | {
        "ts": datetime(2026, 12, 1, 12), "mdt": "fs-MDT0000", "record_index": 7,
        "record_type": "CREAT", "source": "f", "line": 1,
    }  # fmt: skip
    table = pa.Table.from_pylist([row, row], schema=LUSTRE_CHANGELOG_SCHEMA)
    with Store(tmp_path / "s.duckdb") as store:
        assert queries.append_changelog(store, table).result() == 1
        assert queries.append_changelog(store, table).result() == 0
        assert queries.changelog(store).num_rows == 1
