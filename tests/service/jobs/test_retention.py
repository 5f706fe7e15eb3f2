"""The upkeep pass: summaries (the backfill of an upgraded store), then retention per tier."""

from __future__ import annotations

import asyncio
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import Principal, Role
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.collect.collector import Collector
from hpcscope.service.jobs import reports, timeseries
from hpcscope.service.jobs.retention import Upkeep, UpkeepConfig, run_upkeep
from hpcscope.store import Store
from hpcscope.store.cold import cold_dir
from hpcscope.store.migrations import MIGRATIONS

NOW = datetime(2026, 11, 30, 12, 0, 0)
ADMIN = Principal(name="admin", role=Role.ADMIN)
CONFIG = UpkeepConfig(raw_retention_days=14, rollup_retention_days=400)


def _job(store: Store, job_id: str, *, ended_days_ago: float, state: str = "COMPLETED") -> None:
    end = NOW - timedelta(days=ended_days_ago)
    start = end - timedelta(hours=2)
    record = {
        "job_id": job_id,
        "user": "alice",
        "account": "vision",
        "state": state,
        "exit_code": 0,
        "start_time": start,
        "end_time": None if state == "RUNNING" else end,
        "gpus": 2,
        "source": "test",
    }
    store.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA)).result()
    rows = []
    for i in range(0, 7200, 30):
        for gpu in range(2):
            row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
            row.update(
                ts=start + timedelta(seconds=i),
                node="gpu01",
                gpu=gpu,
                job_id=job_id,
                reported_util_ratio=0.9,
                sm_active_ratio=0.3 + 0.2 * gpu,
            )
            rows.append(row)
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()


def _count(store: Store, sql: str) -> int:
    return int(store.query(sql).to_pylist()[0]["n"])


def _report(store: Store, job_id: str) -> JobReport:
    (found,) = reports.reports_for(
        store,
        ADMIN,
        job_ids=[job_id],
        now=NOW,
        scrape_interval_seconds=30.0,
        gpu_hour_price=1.0,
        currency="EUR",
    )
    return found


def test_after_retention_old_jobs_answer_from_summaries_and_rollups(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _job(store, "1", ended_days_ago=30)  # old and finished: raw goes
        _job(store, "2", ended_days_ago=1)  # finished recently: raw stays
        _job(store, "3", ended_days_ago=30, state="RUNNING")  # never summarised: raw stays
        before = _report(store, "1")
        done = run_upkeep(store, CONFIG, now=NOW, scrape_interval_seconds=30.0)
        assert done.summaries_written == 2
        assert done.raw_samples_deleted == 480
        assert _count(store, "SELECT count(*) AS n FROM gpu_samples WHERE job_id = '1'") == 0
        assert _count(store, "SELECT count(*) AS n FROM gpu_samples WHERE job_id = '2'") == 480
        assert _count(store, "SELECT count(*) AS n FROM gpu_samples WHERE job_id = '3'") == 480
        after = _report(store, "1")
        assert after.source == "summary"
        assert after.useful_gpu_hours == pytest.approx(before.useful_gpu_hours)
        assert after.sm_active_ratio == pytest.approx(before.sm_active_ratio)
        assert after.verdict == before.verdict != "no_data"
        # the raw samples went to the cold tier: the chart still zooms in to them
        series = timeseries.job_timeseries(store, "1", scrape_interval_seconds=30.0).model_dump(
            mode="json"
        )
        assert series["source"] == "raw" and series["out_of_retention"] == []
        assert series["bucket_seconds"] == 30
        assert series["series"][1]["sm_active_ratio"][0] == pytest.approx(0.5)
        cold = cold_dir(store.path)
        assert cold is not None and len(list(cold.glob("day=*/*.parquet"))) == 1
        # rollups past their retention go too, and a site removes its old Parquet files: the
        # chart then says so, the report still answers
        later = NOW + timedelta(days=400)
        run_upkeep(store, CONFIG, now=later, scrape_interval_seconds=30.0)
        shutil.rmtree(cold)
        gone = timeseries.job_timeseries(store, "1", scrape_interval_seconds=30.0).model_dump(
            mode="json"
        )
        assert gone["series"] == [] and gone["source"] is None
        (window,) = gone["out_of_retention"]
        assert window["end"] - window["start"] == pytest.approx(7200 - 30)
        assert _report(store, "1").useful_gpu_hours == pytest.approx(before.useful_gpu_hours)


def test_an_upgraded_store_gets_summaries_of_its_finished_jobs_on_the_first_cycle(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    with Store(path, migrations=tuple(m for m in MIGRATIONS if m.version <= 6)) as old:
        now = utcnow()
        end = now - timedelta(days=2)
        record = {
            "job_id": "9",
            "user": "alice",
            "state": "FAILED",
            "exit_code": 1,
            "start_time": end - timedelta(hours=1),
            "end_time": end,
            "gpus": 1,
            "source": "test",
        }
        old.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA)).result()
        row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
        row.update(ts=end - timedelta(minutes=5), node="gpu01", gpu=0, job_id="9")
        row.update(reported_util_ratio=0.5, sm_active_ratio=0.25)
        old.append("gpu_samples", pa.Table.from_pylist([row], schema=GPU_SAMPLE_SCHEMA)).result()
    with Store(path) as store:
        assert _count(store, "SELECT count(*) AS n FROM job_summaries") == 0
        upkeep = Upkeep(store, UpkeepConfig(every_cycles=3), scrape_interval_seconds=15.0)
        first = upkeep.after_cycle()
        assert first is not None and first.summaries_written == 1
        assert upkeep.after_cycle() is None and upkeep.after_cycle() is None
        assert upkeep.after_cycle() is not None  # the 4th cycle is due again
        (summary,) = store.query("SELECT * FROM job_summaries").to_pylist()
        assert summary["exit_cause"] == "user_error" and summary["gpus_observed"] == 1
        assert _count(store, "SELECT count(*) AS n FROM gpu_rollups_1m") == 1


def test_the_collector_runs_the_upkeep_on_its_first_cycle_and_then_every_n(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.duckdb")
    now = utcnow()
    finished = {
        "job_id": "5",
        "user": "alice",
        "state": "COMPLETED",
        "start_time": now - timedelta(hours=2),
        "end_time": now - timedelta(hours=1),
        "gpus": 1,
        "source": "test",
    }
    store.upsert_jobs(pa.Table.from_pylist([finished], schema=JOB_SCHEMA)).result()
    upkeep = Upkeep(store, UpkeepConfig(every_cycles=2), scrape_interval_seconds=15.0)
    collector = Collector(store, [], after_cycle=[upkeep.after_cycle])

    async def cycles() -> list[int]:
        written = []
        try:
            for _ in range(3):
                await collector.collect_once()
                written.append(_count(store, "SELECT count(*) AS n FROM job_summaries"))
        finally:
            await collector.aclose()
        return written

    assert asyncio.run(cycles()) == [1, 1, 1]  # written on the first cycle, once
    store.close()
