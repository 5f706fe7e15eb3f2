"""A job's time series reads the cold tier's parts of its own days only, and draws the same."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.service.jobs import timeseries
from hpcscope.store import Store
from hpcscope.store import summaries as kept
from tests.store.test_cold import T0, _job, _summarised


def _other_job_weeks_later(store: Store) -> None:
    later = T0 + timedelta(days=14)
    record = {"job_id": "10", "user": "bob", "account": "nlp", "state": "COMPLETED",
              "exit_code": 0, "start_time": later, "end_time": later + timedelta(hours=1),
              "gpus": 1, "source": "test"}  # fmt: skip
    store.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA)).result()
    row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
    row.update(ts=later, node="gpu02", gpu=0, job_id="10", sm_active_ratio=0.5)
    store.append("gpu_samples", pa.Table.from_pylist([row], schema=GPU_SAMPLE_SCHEMA)).result()


def test_the_reach_is_the_jobs_days_and_the_chart_is_unchanged(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _job(store)
        _other_job_weeks_later(store)
        _summarised(store)
        kept.delete_raw_samples(store, before=T0 + timedelta(days=20)).result()
        since, until = timeseries._reach(store, "9")
        assert (since, until) == (T0 - timedelta(days=1), T0 + timedelta(hours=2, days=1))
        assert timeseries._reach(store, "unknown") == (None, None)
        bounded = timeseries.job_timeseries(store, "9", scrape_interval_seconds=15.0)
        original = timeseries._reach
        try:
            timeseries._reach = lambda _store, _job_id: (None, None)  # type: ignore[assignment]
            unbounded = timeseries.job_timeseries(store, "9", scrape_interval_seconds=15.0)
        finally:
            timeseries._reach = original
        assert bounded == unbounded and bounded.series
