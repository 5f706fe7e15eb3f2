"""``hpcscope job report JOBID``: the per-GPU table with memory and the notes (what is wrong,
the threshold, what to do), offline and against a live server (access control applies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.contracts import JobReportWithNotes
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import DEMO_PASSWORDS, demo_users
from tests.support.notify_data import write_scenario
from tests.support.servers import live_server

runner = CliRunner()


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    service = Service.open(Settings(store_path=path), users=demo_users())
    write_scenario(service.store, now=utcnow())
    service.close()
    return path


def test_report_offline_shows_gpus_memory_and_notes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["job", "report", "5003", "--store", str(_store(tmp_path))])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "Job 5003 job-5003 — dave / speech — RUNNING" in out
    assert "memory" in out and "30.0/79.6" in out and "0.5/79.6" in out
    assert "* WARNING: 1 of the 2 allocated GPUs did no work (gpu01 GPU 5)." in out
    assert "threshold: a GPU is idle at or under 5 % SM active and utilization" in out
    assert "what to do: Request only the GPUs the code uses (--gpus=1)" in out


def test_report_json_is_the_documented_schema(tmp_path: Path) -> None:
    store = str(_store(tmp_path))
    result = runner.invoke(app, ["job", "report", "5001", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    JobReportWithNotes.model_validate(data)
    assert [n["rule_id"] for n in data["notes"]["notes"]] == ["unused-gpus", "memory-headroom"]
    plain = json.loads(runner.invoke(app, ["job", "5001", "--store", store, "--json"]).stdout)
    assert "notes" not in plain  # plain `job` keeps its document


def test_report_against_a_server_applies_access(tmp_path: Path) -> None:
    service = Service.open(Settings(store_path=tmp_path / "s.duckdb"), users=demo_users())
    write_scenario(service.store, now=utcnow())
    try:
        with live_server(create_app(service)) as url:
            auth = ["--url", url, "--user", "alice", "--password", DEMO_PASSWORDS["alice"]]
            mine = runner.invoke(app, ["job", "report", "5001", *auth])
            assert mine.exit_code == 0, mine.output
            assert "* ERROR: The job did not use its 2 GPU(s)" in " ".join(mine.stdout.split())
            theirs = runner.invoke(app, ["job", "report", "5002", *auth, "--json"])
            assert theirs.exit_code == 1
            assert "job-5002" not in theirs.stdout and "bob" not in theirs.stdout
    finally:
        service.close()


def test_usage_errors() -> None:
    assert runner.invoke(app, ["job", "report"]).exit_code == 2
    assert runner.invoke(app, ["job", "5001", "5002"]).exit_code == 2


def test_notify_commands_against_a_server(tmp_path: Path) -> None:
    from hpcscope.store.notify import AuditEntry, record_audit

    service = Service.open(Settings(store_path=tmp_path / "s.duckdb"), users=demo_users())
    record_audit(
        service.store,
        [
            AuditEntry(at=utcnow(), kind="action", rule_id="idle-allocation", job_id="5001",
                       user="alice", account="vision", channel="scancel", recipient=None,
                       outcome="cancelled", detail="scancel 5001: ok")
        ],
    ).result()  # fmt: skip
    try:
        with live_server(create_app(service)) as url:

            def as_user(name: str, *args: str) -> Any:
                auth = ["--url", url, "--user", name, "--password", DEMO_PASSWORDS[name]]
                return runner.invoke(app, ["notify", *args, *auth], env={"COLUMNS": "200"})

            admin = as_user("admin", "audit", "--json")
            assert admin.exit_code == 0, admin.output
            [entry] = json.loads(admin.stdout)["entries"]
            assert (entry["job_id"], entry["outcome"]) == ("5001", "cancelled")
            table = as_user("admin", "audit", "--kind", "action")
            assert "cancelled" in table.stdout and "scancel" in table.stdout
            denied = as_user("alice", "audit")
            assert denied.exit_code == 1 and "5001" not in denied.stdout
            mine = as_user("bob", "preferences")
            assert mine.exit_code == 0
            assert "bob: e-mail on, webhook on; muted rules: none" in " ".join(mine.stdout.split())
    finally:
        service.close()
