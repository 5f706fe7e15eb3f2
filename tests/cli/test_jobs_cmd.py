"""``hpcscope jobs`` / ``job``: offline against a store file, and against a live server."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.jobs.retention import UpkeepConfig, run_upkeep
from hpcscope.service.settings import Settings
from tests.conftest import demo_users
from tests.support.data import populate
from tests.support.servers import live_server

runner = CliRunner()


def _store_with_jobs(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    service = Service.open(Settings(store_path=path), users=demo_users())
    populate(service.store, now=utcnow())
    service.close()
    return path


def test_jobs_offline_json(tmp_path: Path) -> None:
    store = _store_with_jobs(tmp_path)
    result = runner.invoke(app, ["jobs", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    jobs = {job["job_id"]: job for job in json.loads(result.stdout)["jobs"]}
    assert set(jobs) == {"101", "102", "103"}
    assert jobs["102"]["verdict"] == "busy_not_computing"


def test_job_offline_table_says_reported_and_real(tmp_path: Path) -> None:
    store = _store_with_jobs(tmp_path)
    result = runner.invoke(app, ["job", "102", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "reported GPU utilization 87 %" in result.stdout
    assert "real efficiency (SM active) 19 %" in result.stdout


def test_unknown_job_is_an_error(tmp_path: Path) -> None:
    store = _store_with_jobs(tmp_path)
    result = runner.invoke(app, ["job", "999", "--store", str(store), "--json"])
    assert result.exit_code == 1
    assert "no job 999" in json.loads(result.stdout)["error"]


def test_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["jobs", "--store", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 1
    assert "cannot open store" in result.stderr


def test_jobs_against_a_server_apply_access_control(tmp_path: Path) -> None:
    service = Service.open(
        Settings(store_path=tmp_path / "s.duckdb", secret_key="k"), users=demo_users()
    )
    populate(service.store, now=utcnow())
    try:
        with live_server(create_app(service)) as url:
            result = runner.invoke(
                app, ["jobs", "--url", url, "--user", "alice", "--password", "alice-demo", "--json"]
            )
            assert result.exit_code == 0, result.output
            assert [j["job_id"] for j in json.loads(result.stdout)["jobs"]] == ["101"]
            denied = runner.invoke(
                app, ["job", "102", "--url", url, "--user", "alice", "--password", "alice-demo"]
            )
            assert denied.exit_code == 1
            bad = runner.invoke(
                app, ["jobs", "--url", url, "--user", "alice", "--password", "wrong"]
            )
            assert bad.exit_code == 1 and "authentication failed" in bad.stderr
            usage = runner.invoke(app, ["jobs", "--url", url], env={"HPCSCOPE_USER": ""})
            assert usage.exit_code == 2
    finally:
        service.close()


def test_a_finished_job_past_raw_retention_still_reports_from_its_summary(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    service = Service.open(Settings(store_path=path), users=demo_users())
    long_ago = utcnow() - timedelta(days=30)
    populate(service.store, now=long_ago)
    ended = {"job_id": "102", "state": "COMPLETED", "end_time": long_ago, "source": "test"}
    service.store.upsert_jobs(pa.Table.from_pylist([ended], schema=JOB_SCHEMA)).result()
    done = run_upkeep(service.store, UpkeepConfig(), now=utcnow(), scrape_interval_seconds=15.0)
    assert done.raw_samples_deleted > 0
    service.close()
    result = runner.invoke(app, ["job", "102", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert "summarised" in result.stdout
    assert "real efficiency (SM active) 19 %" in result.stdout
    data = json.loads(runner.invoke(app, ["job", "102", "--store", str(path), "--json"]).stdout)
    assert data["source"] == "summary" and data["gpus_observed"] == 4


def test_store_upkeep_summarises_offline(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    service = Service.open(Settings(store_path=path), users=demo_users())
    long_ago = utcnow() - timedelta(days=30)
    populate(service.store, now=long_ago)
    ended = {"job_id": "101", "state": "COMPLETED", "end_time": long_ago, "source": "test"}
    service.store.upsert_jobs(pa.Table.from_pylist([ended], schema=JOB_SCHEMA)).result()
    service.close()
    result = runner.invoke(app, ["store", "upkeep", "--store", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["summaries_written"] == 1 and data["raw_samples_deleted"] > 0
    again = runner.invoke(app, ["store", "upkeep", "--store", str(path)])
    assert again.exit_code == 0 and "0 job summaries written" in again.stdout
