"""A finished job's time series is stored once, as the exact bytes the route serves; retention
that deletes what it read drops it and the keeper stores it again; a store before migration 20
upgrades in place; the route still checks who may see the job."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import Principal, Role
from hpcscope.serve.app import create_app
from hpcscope.serve.kept import serialise
from hpcscope.service.core import SeenJob, Service
from hpcscope.service.jobs import documents, timeseries
from hpcscope.service.jobs.retention import run_upkeep
from hpcscope.store import Store
from hpcscope.store import job_documents as stored
from hpcscope.store import summaries as kept
from hpcscope.store.migrations import MIGRATIONS
from tests.conftest import basic_auth
from tests.service.jobs.test_retention import CONFIG, NOW
from tests.service.jobs.test_retention import _job as retention_job
from tests.store.test_cold import T0, _job, _summarised


def _fresh(store: Store) -> bytes:
    return serialise(timeseries.job_timeseries(store, "9", scrape_interval_seconds=15.0))[0]


def test_the_stored_series_is_the_routes_bytes_and_is_stored_once(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _job(store)
        assert documents.store_timeseries(store, scrape_interval_seconds=15.0) == 0  # running
        _summarised(store)
        assert stored.jobs_without(store, documents.TIMESERIES, limit=10) == ["9"]
        assert documents.store_timeseries(store, scrape_interval_seconds=15.0) == 1
        assert documents.store_timeseries(store, scrape_interval_seconds=15.0) == 0
        found = documents.stored_timeseries(store, "9")
        assert found is not None and found == serialise(
            timeseries.job_timeseries(store, "9", scrape_interval_seconds=15.0)
        )
        assert b'"series":[{' in found[0] and documents.stored_timeseries(store, "8") is None


def test_rollups_past_retention_drop_the_series_and_the_keeper_stores_it_again(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _job(store)
        _summarised(store)
        keeper = documents.DocumentKeeper(
            store, scrape_interval_seconds=15.0, start=lambda work: work()
        )
        keeper.after_cycle()
        assert keeper.stored == 1
        kept.delete_raw_samples(store, before=T0 + timedelta(days=20)).result()  # to cold
        assert (
            documents.forget_after_retention(
                store, raw_before=T0 + timedelta(days=20), rollups_before=None
            )
            == 0
        )  # moved to the cold tier, not deleted: the chart is the same
        assert documents.stored_timeseries(store, "9") is not None
        kept.delete_final_rollups(store, before=T0 + timedelta(days=20)).result()
        assert (
            documents.forget_after_retention(
                store, raw_before=None, rollups_before=T0 + timedelta(days=20)
            )
            == 1
        )
        assert documents.stored_timeseries(store, "9") is None
        keeper.after_cycle()
        again = documents.stored_timeseries(store, "9")
        assert keeper.stored == 2 and again is not None and again[0] == _fresh(store)


def test_a_store_without_a_cold_tier_drops_the_series_that_read_deleted_samples() -> None:
    with Store(":memory:") as store:
        _job(store)
        _summarised(store)
        assert documents.store_timeseries(store, scrape_interval_seconds=15.0) == 1
        kept.delete_raw_samples(store, before=T0 + timedelta(days=20)).result()
        assert (
            documents.forget_after_retention(
                store, raw_before=T0 + timedelta(days=20), rollups_before=None
            )
            == 1
        )


def test_a_store_before_migration_20_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store(path, migrations=tuple(m for m in MIGRATIONS if m.version < 20)) as old:
        _job(old)
        _summarised(old)
        assert old.schema_version() == 19
    with Store(path) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version >= 20
        assert stored.jobs_without(upgraded, documents.TIMESERIES, limit=10) == ["9"]
        assert documents.store_timeseries(upgraded, scrape_interval_seconds=15.0) == 1


def test_the_route_serves_the_stored_bytes_to_whoever_may_see_the_job(service: Service) -> None:
    _job(service.store)
    _summarised(service.store)
    interval = service.settings.scrape_interval_seconds
    admin = SeenJob(Principal("admin", Role.ADMIN), "9", ended=True)
    assert service.stored_timeseries(admin) is None
    assert documents.store_timeseries(service.store, scrape_interval_seconds=interval) == 1
    body, etag = documents.stored_timeseries(service.store, "9") or (b"", "")
    assert service.stored_timeseries(admin) == (body, etag)
    assert service.stored_timeseries(SeenJob(admin.principal, "9", ended=False)) is None
    assert body == serialise(service.timeseries_of(admin))[0]
    with TestClient(create_app(service)) as client:
        answer = client.get("/api/jobs/9/timeseries", headers=basic_auth("alice"))
        assert answer.status_code == 200 and answer.content == body
        assert answer.headers["etag"] == etag
        refused = client.get("/api/jobs/9/timeseries", headers=basic_auth("bob"))
        assert refused.status_code == 404 and b"series" not in refused.content
    # what the route serves is the stored row (a marked one here), not a computation
    marked = stored.JobDocument("9", '"marked"', b'{"marked":true}')
    stored.write_documents(service.store, documents.TIMESERIES, [marked], now=T0).result()
    service.snapshots.clear()  # the answer kept in memory from the reads above
    with TestClient(create_app(service)) as client:
        answer = client.get("/api/jobs/9/timeseries", headers=basic_auth("alice"))
        assert answer.content == b'{"marked":true}' and answer.headers["etag"] == '"marked"'
        assert client.get("/api/jobs/9/timeseries", headers=basic_auth("bob")).status_code == 404


def test_a_pass_stops_when_told_and_writes_what_it_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        for job_id, days in (("1", 3), ("2", 2), ("3", 1)):
            retention_job(store, job_id, ended_days_ago=days)
        run_upkeep(store, CONFIG, now=NOW, scrape_interval_seconds=30.0)
        monkeypatch.setattr(documents, "WRITE_BYTES", 1)  # each body written on its own
        monkeypatch.setattr(documents, "BATCH_JOBS", 1)  # a pause after each job
        paused: list[float] = []

        def pause(seconds: float) -> bool:
            paused.append(seconds)
            return len(paused) == 2

        assert documents.store_timeseries(store, scrape_interval_seconds=30.0, pause=pause) == 2
        assert stored.jobs_without(store, documents.TIMESERIES, limit=10) == ["1"]  # oldest
        assert len(paused) == 2 and all(seconds > 0 for seconds in paused)
        assert documents.store_timeseries(store, scrape_interval_seconds=30.0) == 1


def test_a_chart_the_route_computed_is_stored_once_the_job_is_summarised(
    service: Service,
) -> None:
    _job(service.store)  # ended, not summarised yet: its samples may still change
    with TestClient(create_app(service)) as client:
        first = client.get("/api/jobs/9/timeseries", headers=basic_auth("alice"))
        assert first.status_code == 200 and b'"series":[{' in first.content
        service.store.flush()
        assert documents.stored_timeseries(service.store, "9") is None
        _summarised(service.store)
        service.snapshots.clear()
        second = client.get("/api/jobs/9/timeseries", headers=basic_auth("alice"))
        service.store.flush()
        assert documents.stored_timeseries(service.store, "9") == (
            second.content,
            second.headers["etag"],
        )
        assert second.content == _fresh(service.store)
        # read from the store from now on: the keeper has nothing left to compute
        assert stored.jobs_without(service.store, documents.TIMESERIES, limit=10) == []
        service.snapshots.clear()
        assert client.get("/api/jobs/9/timeseries", headers=basic_auth("bob")).status_code == 404


def test_documents_written_to_remember_are_read_without_a_query_and_follow_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        one = stored.JobDocument("1", '"a"', b"first")
        stored.write_documents(store, "k", [one], now=T0, remember=True).result()
        assert stored.remembered_document(store, "1", "k") == (b"first", '"a"')
        assert stored.remembered_document(store, "1", "other") is None
        again = stored.JobDocument("1", '"b"', b"second")
        stored.write_documents(store, "k", [again], now=T0).result()  # not remembered
        assert stored.remembered_document(store, "1", "k") is None
        assert stored.read_document(store, "1", "k") == (b"second", '"b"')
        stored.write_documents(store, "k", [again], now=T0, remember=True).result()
        stored.write_documents(store, "k-old", [one], now=T0, remember=True).result()
        stored.forget_other_kinds(store, "k-", "k-new").result()
        assert stored.remembered_document(store, "1", "k-old") is None
        assert stored.remembered_document(store, "1", "k") == (b"second", '"b"')
        monkeypatch.setattr(stored, "MEMORY_BYTES", 10)  # the least recently used goes first
        two = stored.JobDocument("2", '"c"', b"third")
        stored.write_documents(store, "k", [two], now=T0, remember=True).result()
        assert stored.remembered_document(store, "1", "k") is None
        assert stored.remembered_document(store, "2", "k") == (b"third", '"c"')
        assert stored.read_document(store, "1", "k") == (b"second", '"b"')  # the row stays


def test_the_route_answers_a_chart_this_process_stored_from_memory(service: Service) -> None:
    _job(service.store)
    _summarised(service.store)
    interval = service.settings.scrape_interval_seconds
    assert documents.store_timeseries(service.store, scrape_interval_seconds=interval) == 1
    body, etag = documents.remembered_timeseries(service.store, "9") or (b"", "")
    assert body == _fresh_at(service.store, interval)
    # the row changed behind the memory's back (never done but here): the route reads memory
    service.store.submit_write(
        lambda con: con.execute("UPDATE job_documents SET etag = '\"x\"'")
    ).result()
    assert stored.read_document(service.store, "9", documents.TIMESERIES) == (body, etag)
    with TestClient(create_app(service)) as client:
        answer = client.get("/api/jobs/9/timeseries", headers=basic_auth("alice"))
        assert answer.content == body and answer.headers["etag"] == etag
        assert client.get("/api/jobs/9/timeseries", headers=basic_auth("bob")).status_code == 404
    assert service.store.query_row("SELECT etag FROM job_documents") == ('"x"',)
    # answered before the snapshots: no entry of the chart was computed or kept
    assert not [k for k in service.snapshots._entries if "serve.job_timeseries" in str(k)]
    # retention that drops it drops it from memory too
    kept.delete_final_rollups(service.store, before=T0 + timedelta(days=20)).result()
    kept.delete_raw_samples(service.store, before=T0 + timedelta(days=20)).result()
    documents.forget_after_retention(
        service.store, raw_before=None, rollups_before=T0 + timedelta(days=20)
    )
    assert documents.remembered_timeseries(service.store, "9") is None


def _fresh_at(store: Store, interval: float) -> bytes:
    return serialise(timeseries.job_timeseries(store, "9", scrape_interval_seconds=interval))[0]
