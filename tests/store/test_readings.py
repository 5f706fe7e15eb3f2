"""Migration 15: one gpu_readings row per GPU and time with its job(s), gpu_samples its view."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.model.schemas import (
    GPU_READING_SCHEMA,
    GPU_SAMPLE_SCHEMA,
    JOB_ALIAS_SCHEMA,
    JOB_GPU_SUMMARY_SCHEMA,
    JOB_SUMMARY_SCHEMA,
)
from hpcscope.store import Store, summaries
from hpcscope.store import slurm as slurm_store
from hpcscope.store.migrations import MIGRATIONS
from hpcscope.store.readings import by_job

T0 = datetime(2026, 11, 1)


def _reading(
    seconds: int, job: str | None, shared: list[str] | None, watts: float
) -> dict[str, object]:
    row: dict[str, object] = {f.name: None for f in GPU_READING_SCHEMA}
    row.update(
        ts=T0 + timedelta(seconds=seconds),
        node="gpu01",
        gpu=0,
        job_id=job,
        shared_job_ids=shared,
        power_watts=watts,
    )
    return row


def _filler(kind: pa.DataType) -> object:
    """A value of ``kind`` for the NOT NULL columns the test does not care about."""
    if pa.types.is_timestamp(kind):
        return T0
    if pa.types.is_string(kind):
        return "completed"
    if pa.types.is_boolean(kind):
        return False
    return 0


def _samples(store: Store) -> list[tuple[int, str | None, float]]:
    rows = store.query(
        "SELECT ts, job_id, power_watts FROM gpu_samples ORDER BY ts, job_id NULLS FIRST"
    ).to_pylist()
    return [(int((r["ts"] - T0).total_seconds()), r["job_id"], r["power_watts"]) for r in rows]


def test_an_old_store_upgrades_in_place_and_keeps_its_copies(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    before = tuple(m for m in MIGRATIONS if m.version < 15)
    copies = [_reading(0, job, None, 100.0) for job in ("7", "8")]  # one row per copy
    with Store(path, migrations=before) as old:
        old.append("gpu_samples", pa.Table.from_pylist(copies, schema=GPU_READING_SCHEMA)).result()
        assert old.query("SELECT count(*) AS n FROM gpu_samples").to_pylist() == [{"n": 2}]
    with Store(path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
        assert _samples(store) == [(0, "7", 100.0), (0, "8", 100.0)]  # history as it was
        shared = [_reading(1, "7", ["8"], 101.0), _reading(2, None, None, 90.0)]
        store.append("gpu_samples", pa.Table.from_pylist(shared, schema=GPU_READING_SCHEMA))
        store.flush()
        assert store.query("SELECT count(*) AS n FROM gpu_readings").to_pylist() == [{"n": 4}]
        assert _samples(store) == [
            (0, "7", 100.0),
            (0, "8", 100.0),
            (1, "7", 101.0),
            (1, "8", 101.0),
            (2, None, 90.0),
        ]
        columns = store.query("SELECT * FROM gpu_samples LIMIT 0").schema.names
        assert columns == GPU_SAMPLE_SCHEMA.names  # readers see the shape they knew
        # rollups are per job, as before: the shared GPU's minute counts for both jobs
        minutes = store.query(
            "SELECT job_id, sum(samples) AS n FROM gpu_rollups_1m GROUP BY ALL ORDER BY 1"
        ).to_pylist()
        assert minutes == [
            {"job_id": "7", "n": 2},
            {"job_id": "8", "n": 2},
            {"job_id": None, "n": 1},
        ]


def test_appending_per_job_rows_still_works(tmp_path: Path) -> None:
    rows = [{**_reading(0, "5", None, 50.0)}]
    for row in rows:
        del row["shared_job_ids"]
    with Store(tmp_path / "s.duckdb") as store:
        store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()
        assert _samples(store) == [(0, "5", 50.0)]


def test_by_job_spreads_shared_readings() -> None:
    table = pa.Table.from_pylist(
        [_reading(0, "1", ["2", "3"], 1.0), _reading(1, "4", None, 2.0)],
        schema=GPU_READING_SCHEMA,
    )
    spread = by_job(table)
    assert spread.schema.names == GPU_SAMPLE_SCHEMA.names
    assert sorted(
        zip(
            spread.column("job_id").to_pylist(),
            spread.column("power_watts").to_pylist(),
            strict=True,
        )
    ) == [
        ("1", 1.0),
        ("2", 1.0),
        ("3", 1.0),
        ("4", 2.0),
    ]


def test_aliases_rename_shared_jobs_too(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        readings = [_reading(0, "4242", ["77"], 10.0), _reading(1, "77", ["4242"], 11.0)]
        store.append("gpu_samples", pa.Table.from_pylist(readings, schema=GPU_READING_SCHEMA))
        aliases = pa.Table.from_pylist(
            [{"raw_job_id": "4242", "job_id": "4240_2", "cluster": None}], schema=JOB_ALIAS_SCHEMA
        )
        slurm_store.upsert_aliases(store, aliases).result()
        assert _samples(store) == [
            (0, "4240_2", 10.0),
            (0, "77", 10.0),
            (1, "4240_2", 11.0),
            (1, "77", 11.0),
        ]


def test_retention_keeps_a_shared_reading_until_all_its_jobs_are_summarised(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        readings = [_reading(0, "1", ["2"], 10.0), _reading(1, "1", None, 11.0)]
        store.append("gpu_samples", pa.Table.from_pylist(readings, schema=GPU_READING_SCHEMA))
        store.finalise_rollups(T0 + timedelta(hours=1)).result()
        summary = {f.name: _filler(f.type) for f in JOB_SUMMARY_SCHEMA}
        summary["job_id"] = "1"
        gpus = JOB_GPU_SUMMARY_SCHEMA.empty_table()
        table = pa.Table.from_pylist([summary], schema=JOB_SUMMARY_SCHEMA)
        summaries.write_summaries(store, table, gpus).result()
        deleted = summaries.delete_raw_samples(store, before=T0 + timedelta(days=1)).result()
        assert deleted == 1
        assert _samples(store) == [(0, "1", 10.0), (0, "2", 10.0)]  # job 2 is not summarised
