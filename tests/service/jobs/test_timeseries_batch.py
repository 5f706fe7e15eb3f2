"""The keeper's batch of charts (:func:`embedded_timeseries_of`) draws each job exactly as the
chart of that job alone: the same bytes, the same earliest raw sample and rollup minute, for
jobs in the cold tier, in the table, across both, running, summarised or not, unknown."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.service.jobs import documents, timeseries
from hpcscope.service.jobs.retention import run_upkeep
from hpcscope.store import Store
from hpcscope.store import job_documents as stored
from hpcscope.store.cold import cold_dir, cold_time_ranges
from hpcscope.store.reports import EmbeddedSamples, sample_time_range
from tests.service.jobs.test_retention import CONFIG, NOW
from tests.service.jobs.test_retention import _job as retention_job

#: Jobs ended this many days before NOW: past raw retention (14 days: the cold tier), inside
#: it, and one running; two of them share a day.
ENDED_DAYS_AGO = {"1": 20.0, "2": 20.2, "3": 16.0, "4": 3.0, "5": 0.5}


def _late_sample(store: Store, job_id: str) -> None:
    """A sample of ``job_id`` in the table after its older ones went to the cold tier."""
    row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
    row.update(ts=NOW - timedelta(days=19), node="gpu02", gpu=1, job_id=job_id,
               reported_util_ratio=0.5, sm_active_ratio=0.125)  # fmt: skip
    store.append("gpu_samples", pa.Table.from_pylist([row], schema=GPU_SAMPLE_SCHEMA)).result()


def _store(store: Store) -> list[str]:
    for job_id, days in ENDED_DAYS_AGO.items():
        retention_job(store, job_id, ended_days_ago=days)
    retention_job(store, "6", ended_days_ago=0.01, state="RUNNING")
    run_upkeep(store, CONFIG, now=NOW, scrape_interval_seconds=30.0)
    _late_sample(store, "1")  # in the table and the cold tier
    return [*ENDED_DAYS_AGO, "6", "unknown"]


def _same_as_alone(store: Store, job_ids: list[str]) -> None:
    reader = EmbeddedSamples(store)
    together = timeseries.embedded_timeseries_of(store, job_ids, reader, 30.0)
    assert list(together) == job_ids
    for job_id in job_ids:
        alone = timeseries.embedded_timeseries(store, job_id, reader, 30.0)
        assert together[job_id] == alone, job_id
        assert documents.document_bytes(together[job_id].document) == documents.document_bytes(
            alone.document
        )


def test_a_batch_draws_each_job_as_alone_with_a_cold_tier(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        job_ids = _store(store)
        directory = cold_dir(store.path)
        assert directory is not None and any(directory.glob("day=*/*.parquet"))
        _same_as_alone(store, job_ids)
        _same_as_alone(store, ["4", "1"])  # a batch whose days do not touch
        charts = timeseries.embedded_timeseries_of(store, job_ids, EmbeddedSamples(store), 30.0)
        assert charts["1"].document.series and charts["4"].document.series
        assert charts["4"].summarised and not charts["6"].summarised
        assert charts["unknown"].document.source is None


def test_cold_ranges_are_each_jobs_own_window(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _store(store)
        start = NOW - timedelta(days=20, hours=2)
        windows = {
            "1": (start + timedelta(hours=1), None),
            "2": (None, NOW - timedelta(days=20, hours=3)),
            "3": (None, None),
            "4": (None, None),
        }
        found = cold_time_ranges(store, windows)
        assert set(found) == {"1", "2", "3"}  # 4 is in the table only
        for job_id in ("1", "2", "3"):
            since, until = windows[job_id]
            alone = sample_time_range(store, job_id, cold_since=since, cold_until=until)
            hot = store.query(
                "SELECT min(ts) AS a FROM gpu_samples WHERE job_id = ?", [job_id]
            ).to_pylist()[0]["a"]
            if hot is None:
                assert found[job_id] == alone
        assert found["1"][0] == start + timedelta(hours=1)
        assert cold_time_ranges(store, {}) == {}


def test_a_batch_draws_each_job_as_alone_without_a_cold_tier() -> None:
    with Store(":memory:") as store:
        _same_as_alone(store, _store(store))


def test_the_keeper_stores_the_batch_as_each_job_alone(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _store(store)
        assert documents.store_timeseries(store, scrape_interval_seconds=30.0) == 5
        reader = EmbeddedSamples(store)
        for job_id in ENDED_DAYS_AGO:
            alone = timeseries.embedded_timeseries(store, job_id, reader, 30.0)
            assert documents.stored_timeseries(store, job_id) == documents.document_bytes(
                alone.document
            )
        assert stored.jobs_without(store, documents.TIMESERIES, limit=10) == []


def test_the_keeper_rests_only_once_it_is_less_than_a_pass_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _store(store)  # five summarised jobs without a chart
        monkeypatch.setattr(documents, "PASS_JOBS", 2)
        keeper = documents.DocumentKeeper(
            store, scrape_interval_seconds=30.0, start=lambda work: work()
        )
        assert keeper.rest_share() == 0.0
        keeper.after_cycle()
        keeper.after_cycle()  # one left
        assert keeper.stored == 4 and keeper.rest_share() == documents.REST_SHARE > 0
