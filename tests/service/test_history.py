"""The demo's past read into a real store by the collector's code: jobs, samples, summaries,
alerts, and the pages that read them (chargeback, SLOs, the job list)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import system_principal
from hpcscope.model.alerts import AlertState
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.history import HistoryReport, write_history
from hpcscope.service.jobs import documents, timeseries
from hpcscope.service.settings import Settings
from hpcscope.service.traces.captures import CaptureSpool
from hpcscope.store import job_documents as stored
from hpcscope.twin.history import simulate_history
from tests.conftest import basic_auth, demo_users

END = datetime(2026, 11, 20, 9, 30)
DAYS = 8.0


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, HistoryReport]]:
    root: Path = tmp_path_factory.mktemp("history")
    service = Service.open(Settings(store_path=root / "s.duckdb"), users=demo_users())
    chunks = simulate_history(
        service.topology,
        root / "twin",
        end=epoch_seconds(END),
        days=DAYS,
        step_seconds=600,
        capture_dir=root / "capture",
    )
    report = write_history(service, chunks, root / "read", end=END, step_seconds=600)
    # the golden path's captures of the last week, as the live capture source reads them
    CaptureSpool(service.store, root / "capture", grace_seconds=0.0).collect_once()
    try:
        yield service, report
    finally:
        service.close()


def test_every_finished_job_has_the_summary_a_live_collection_writes(
    written: tuple[Service, HistoryReport],
) -> None:
    service, report = written
    rows = service.store.query(
        "SELECT j.job_id, j.state, s.exit_cause, s.allocated_gpu_seconds, "
        "s.observed_gpu_seconds FROM jobs j LEFT JOIN job_summaries s USING (job_id)"
    ).to_pylist()
    assert len(rows) == report.jobs > 100
    assert all(r["exit_cause"] is not None for r in rows), "a job without its summary"
    causes = Counter(r["exit_cause"] for r in rows)
    assert {"success", "user_error", "node_failure_xid", "timeout", "cancelled"} <= set(causes)
    ran = [r for r in rows if r["allocated_gpu_seconds"]]
    # each sample stands for one grid step: what was observed is what was allocated
    assert all(r["observed_gpu_seconds"] == pytest.approx(r["allocated_gpu_seconds"]) for r in ran)


def test_samples_are_attributed_through_the_allocations(
    written: tuple[Service, HistoryReport],
) -> None:
    service, report = written
    counts = service.store.query(
        "SELECT count(*) AS all_rows, count(job_id) AS attributed FROM gpu_samples"
    ).to_pylist()[0]
    assert counts["all_rows"] == report.samples == DAYS * 144 * 16
    assert 0.2 < counts["attributed"] / counts["all_rows"] < 0.9


def test_incidents_became_alerts_and_old_ones_were_handled(
    written: tuple[Service, HistoryReport],
) -> None:
    service, report = written
    alerts = service.alerts(system_principal("test"))
    assert report.alerts > 0 and alerts
    assert {a.vector.name for a in alerts} >= {"SUPPLY_CHAIN"}
    assert all(a.last_seen < END for a in alerts)
    old = [a for a in alerts if a.last_seen < END - timedelta(days=4)]
    assert old and all(a.state is not AlertState.OPEN for a in old if a.job_id)
    assert all(a.state is AlertState.OPEN for a in old if not a.job_id)  # a node's: open
    assert any(a.state is AlertState.OPEN for a in alerts if a not in old)


def test_the_pages_show_the_month(written: tuple[Service, HistoryReport]) -> None:
    service, _ = written
    with TestClient(create_app(service)) as client:
        admin = basic_auth("admin")
        charge = client.get("/api/chargeback?period=2026-11", headers=admin).json()
        assert charge["total"]["jobs"] > 100 and charge["total"]["useful_gpu_hours"] > 0
        assert {r["key"] for r in charge["rows"]} == {"vision", "nlp", "speech", "robotics"}
        carol = client.get("/api/chargeback?period=2026-11", headers=basic_auth("carol")).json()
        assert {r["key"] for r in carol["rows"]} == {"vision", "nlp"}
        jobs = client.get("/api/jobs", headers=basic_auth("alice")).json()["jobs"]
        assert jobs and {j["user"] for j in jobs} == {"alice"}
        assert {j["source"] for j in jobs} == {"summary"}


def test_training_jobs_of_the_last_week_were_captured(
    written: tuple[Service, HistoryReport],
) -> None:
    service, _ = written
    rows = service.store.query(
        "SELECT job_id, attribution, straggler_rank, window_end FROM trace_captures"
    ).to_pylist()
    assert rows and all(r["attribution"] == "verified" for r in rows)
    assert any(r["straggler_rank"] is not None for r in rows)
    assert all(r["window_end"] >= END - timedelta(days=7, hours=1) for r in rows)


def test_a_stop_while_the_history_is_written_ends_it_within_a_chunk(tmp_path: Path) -> None:
    """The demo stopped while its month is written: nothing more is read after the chunk (a
    day) during which the stop came, and the report says the history is cut."""
    service = Service.open(Settings(store_path=tmp_path / "s.duckdb"), users=demo_users())
    try:
        chunks = simulate_history(
            service.topology, tmp_path / "twin", end=epoch_seconds(END), days=4.0, step_seconds=600
        )
        ends: list[datetime] = []
        report = write_history(
            service,
            chunks,
            tmp_path / "read",
            end=END,
            step_seconds=600,
            after_chunk=ends.append,
            stopped=lambda: len(ends) >= 2,
        )
        assert report.stopped and len(ends) == 2
        last = service.store.query("SELECT max(ts) AS ts FROM gpu_samples").to_pylist()[0]["ts"]
        assert last is not None and last <= ends[-1] < END - timedelta(days=1)
    finally:
        service.close()


def test_the_finished_jobs_charts_are_stored_as_their_computation(
    written: tuple[Service, HistoryReport],
) -> None:
    service, _ = written
    assert stored.jobs_without(service.store, documents.TIMESERIES, limit=10) == []
    (job_id,) = service.store.query_row("SELECT max(job_id) FROM job_summaries") or ("",)
    fresh = timeseries.job_timeseries(
        service.store,
        job_id,
        scrape_interval_seconds=service.settings.scrape_interval_seconds,
        metrics=service.gpu_samples(),
    )
    assert documents.stored_timeseries(service.store, job_id) == documents.document_bytes(fresh)
