"""``hpcscope job JOBID``: the job's alerts under ``alerts`` (JSON) and as a table, offline and
through a server that applies access control."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from hpcscope.store.alerts import upsert_alerts
from tests.support.data import populate
from tests.support.servers import live_server

runner = CliRunner()
T = datetime(2026, 11, 29, 12, 0, 0)
ALERT = Alert(
    "GI-1", Vector.GRADIENT_INJECTION, Severity.HIGH, "A rank's gradient is an outlier", T, T,
    count=4, node="gpu01", job_id="102", user="bob", account="nlp", gpu=5, subject="rank 1",
    step=17, evidence=(Evidence("step 17: norm z 52", "/spool/102/rank-1.jsonl", "line 18"),),
)  # fmt: skip


def _fill(service: Service) -> None:
    populate(service.store, now=utcnow())
    upsert_alerts(service.store, [ALERT]).result()


def test_job_json_carries_the_alerts_offline(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    service = Service.open(Settings(store_path=path), users=UserDirectory.demo())
    _fill(service)
    service.close()
    result = runner.invoke(app, ["job", "102", "--store", str(path), "--json"])
    assert result.exit_code == 0, result.output
    [alert] = json.loads(result.stdout)["alerts"]
    assert (alert["rule_id"], alert["job_id"], alert["subject"], alert["node"]) == (
        "GI-1", "102", "rank 1", "gpu01",
    )  # fmt: skip
    assert (alert["gpu"], alert["step"], alert["count"], alert["severity"]) == (5, 17, 4, "HIGH")
    assert (
        json.loads(runner.invoke(app, ["job", "101", "--store", str(path), "--json"]).stdout)[
            "alerts"
        ]
        == []
    )
    table = runner.invoke(app, ["job", "102", "--store", str(path)])
    assert "Alerts" in table.stdout and "GI-1" in table.stdout and "rank 1" in table.stdout


def test_job_alerts_through_a_server_are_the_owners_only(tmp_path: Path) -> None:
    service = Service.open(
        Settings(store_path=tmp_path / "s.duckdb", secret_key="k"), users=UserDirectory.demo()
    )
    _fill(service)
    try:
        with live_server(create_app(service)) as url:
            bob = runner.invoke(
                app,
                ["job", "102", "--url", url, "--user", "bob", "--password", "bob-demo", "--json"],
            )
            assert bob.exit_code == 0, bob.output
            assert [a["rule_id"] for a in json.loads(bob.stdout)["alerts"]] == ["GI-1"]
            alice = runner.invoke(
                app,
                [
                    "job",
                    "102",
                    "--url",
                    url,
                    "--user",
                    "alice",
                    "--password",
                    "alice-demo",
                    "--json",
                ],
            )
            assert alice.exit_code == 1 and "GI-1" not in alice.stdout
    finally:
        service.close()
