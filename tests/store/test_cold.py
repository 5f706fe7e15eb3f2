"""The cold tier: raw samples past retention moved to Parquet (zstd, one directory per day),
read again for zoom-in, nothing lost on the way; a store before migration 19 upgrades in place."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.store import Store
from hpcscope.store import summaries as kept
from hpcscope.store.cold import COLD_PARTS, cold_dir, cold_samples
from hpcscope.store.migrations import MIGRATIONS
from hpcscope.store.reports import sample_time_range, samples_for_jobs

T0 = datetime(2026, 1, 10, 23, 0, 0)  # the job straddles a day: two day directories


def _job(store: Store) -> pa.Table:
    record = {"job_id": "9", "user": "alice", "account": "vision", "state": "COMPLETED",
              "exit_code": 0, "start_time": T0, "end_time": T0 + timedelta(hours=2),
              "gpus": 2, "source": "test"}  # fmt: skip
    store.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA)).result()
    rows = []
    for i in range(0, 7200, 15):
        for gpu in range(2):
            row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
            row.update(ts=T0 + timedelta(seconds=i), node="gpu01", gpu=gpu, job_id="9",
                       reported_util_ratio=0.9, sm_active_ratio=0.25 * (gpu + 1))  # fmt: skip
            rows.append(row)
    table = pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)
    store.append("gpu_samples", table).result()
    return table


def _summarised(store: Store) -> None:
    later = T0 + timedelta(days=1)
    assert summarise_finished_jobs(store, now=later, scrape_interval_seconds=15.0) == 1
    store.finalise_rollups(later).result()


def test_raw_samples_past_retention_move_to_parquet_and_read_back(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        original = _job(store)
        _summarised(store)
        before = samples_for_jobs(store, ["9"]).sort_by([("gpu", "ascending"), ("ts", "ascending")])
        moved = kept.delete_raw_samples(store, before=T0 + timedelta(days=20)).result()
        assert moved == original.num_rows
        assert store.query("SELECT count(*) AS n FROM gpu_readings").to_pylist()[0]["n"] == 0
        cold = cold_dir(store.path)
        assert cold == Path(f"{tmp_path / 's.duckdb'}.cold")
        days = sorted(p.parent.name for p in cold.glob("day=*/*.parquet"))
        assert days == ["day=2026-01-10", "day=2026-01-11"]
        for part in cold.glob("day=*/*.parquet"):
            column = pq.ParquetFile(part).metadata.row_group(0).column(0)
            assert column.compression == "ZSTD"
        parts = store.query(f"SELECT sum(rows) AS n FROM {COLD_PARTS}").to_pylist()[0]["n"]
        assert parts == original.num_rows
        # read back exactly: the job's samples, a window of them, its time range
        after = samples_for_jobs(store, ["9"]).sort_by([("gpu", "ascending"), ("ts", "ascending")])
        assert after.to_pylist() == before.to_pylist()
        window = cold_samples(store, ["9"], since=T0 + timedelta(hours=1, minutes=30))
        assert window is not None and window.num_rows == 2 * 120
        assert sample_time_range(store, "9") == (T0, T0 + timedelta(seconds=7185))
        # its parts within a window only: the first day's, or none of them
        first_day = sample_time_range(store, "9", cold_until=T0 + timedelta(seconds=3599))
        assert first_day == (T0, T0 + timedelta(seconds=3585))
        later = sample_time_range(store, "9", cold_since=T0 + timedelta(days=2))
        assert later == (None, None)
        assert cold_samples(store, ["other"]) is not None  # read, nothing of it
        assert samples_for_jobs(store, ["other"]).num_rows == 0


def test_a_store_before_the_cold_tier_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store(path, migrations=tuple(m for m in MIGRATIONS if m.version < 19)) as old:
        _job(old)
        assert old.schema_version() == 18
    with Store(path) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version >= 19
        assert upgraded.query(f"SELECT count(*) AS n FROM {COLD_PARTS}").to_pylist()[0]["n"] == 0
        _summarised(upgraded)
        assert kept.delete_raw_samples(upgraded, before=T0 + timedelta(days=20)).result() > 0
        assert samples_for_jobs(upgraded, ["9"]).num_rows == 2 * 480
