"""The tables this area added match their Arrow schemas; merges are idempotent."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa

from hpcscope.model.schemas import IB_PORT_SCHEMA, JOB_ALIAS_SCHEMA, JOB_ALLOCATION_SCHEMA
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store


def test_added_tables_match_arrow_schemas(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        for table, schema in (
            ("job_aliases", JOB_ALIAS_SCHEMA),
            ("ib_port_counters", IB_PORT_SCHEMA),
        ):
            stored = store.query(f"SELECT * FROM {table} LIMIT 0").schema
            assert stored.names == schema.names
            for field in schema:
                assert stored.field(field.name).type == field.type, field.name


def test_allocation_merge_is_idempotent_and_keeps_end_times(tmp_path: Path) -> None:
    t0, t1 = datetime(2026, 1, 1, 0, 0), datetime(2026, 1, 1, 1, 0)
    open_rows = pa.table(
        {"job_id": ["1", "1"], "node": ["n", "n"], "gpu": [0, 1], "gpu_instance_id": [None, 3],
         "start_time": [t0, t0], "end_time": [None, None]},
        schema=JOB_ALLOCATION_SCHEMA,
    )  # fmt: skip
    ended = open_rows.set_column(5, JOB_ALLOCATION_SCHEMA.field(5), pa.array([t1, t1]))
    with Store(tmp_path / "s.duckdb") as store:
        assert slurm_store.merge_allocations(store, open_rows).result() == 2
        assert slurm_store.merge_allocations(store, open_rows).result() == 0
        assert slurm_store.merge_allocations(store, ended).result() == 0
        assert slurm_store.merge_allocations(store, open_rows).result() == 0
        rows = store.query("SELECT gpu, end_time FROM job_allocations ORDER BY gpu").to_pylist()
    assert rows == [{"gpu": 0, "end_time": t1}, {"gpu": 1, "end_time": t1}]
