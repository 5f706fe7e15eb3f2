"""``hpcscope alerts``: the server's scoped list, as a table and as the /api/alerts JSON."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from hpcscope.store.alerts import set_alert_state, upsert_alerts
from tests.support.data import populate
from tests.support.servers import live_server

runner = CliRunner()
T = datetime(2026, 12, 1, 12, 0, 0)
MINER = Alert(
    "SC-2", Vector.SUPPLY_CHAIN, Severity.CRITICAL, "A binary run from a temp directory", T, T,
    count=2, node="gpu01", job_id="101", subject="/tmp/ultralytics_runner",
    evidence=(Evidence("Falco rule 'Drop and execute new binary'", "falco.json", "line 1"),),
)  # fmt: skip
FOREIGN = Alert(
    "W-1", Vector.DATA_POISONING, Severity.HIGH, "A checkpoint opened by another account", T, T,
    node="gpu02", job_id="102", subject="/lustre/checkpoints/run-a",
)  # fmt: skip


def _invoke(url: str, user: str, *args: str) -> object:
    return runner.invoke(
        app,
        ["alerts", "--url", url, "--user", user, "--password", f"{user}-demo", *args],
        env={"COLUMNS": "250"},
    )


def test_alerts_through_a_server_are_scoped_and_filtered(tmp_path: Path) -> None:
    service = Service.open(
        Settings(store_path=tmp_path / "s.duckdb", secret_key="k"), users=UserDirectory.demo()
    )
    populate(service.store, now=utcnow())
    upsert_alerts(service.store, [MINER, FOREIGN]).result()
    set_alert_state(service.store, FOREIGN.key, AlertState.ACKNOWLEDGED, by="bob", at=T).result()
    try:
        with live_server(create_app(service)) as url:
            alice = _invoke(url, "alice", "--json")
            assert alice.exit_code == 0, alice.output  # type: ignore[attr-defined]
            document = json.loads(alice.stdout)  # type: ignore[attr-defined]
            assert document["count"] == 1 and document["alerts"][0]["rule_id"] == "SC-2"
            assert document["alerts"][0]["user"] == "alice"
            admin = json.loads(_invoke(url, "admin", "--json", "--state", "open").stdout)  # type: ignore[attr-defined]
            assert [a["rule_id"] for a in admin["alerts"]] == ["SC-2"]
            assert admin["filters"]["state"] == "open"
            high = json.loads(_invoke(url, "admin", "--json", "--severity", "high").stdout)  # type: ignore[attr-defined]
            assert [a["rule_id"] for a in high["alerts"]] == ["SC-2", "W-1"]
            table = _invoke(url, "bob")
            assert "W-1" in table.stdout and "acknowledged" in table.stdout  # type: ignore[attr-defined]
            assert "SC-2" not in table.stdout  # type: ignore[attr-defined]
            bad = _invoke(url, "admin", "--severity", "huge", "--json")
            assert bad.exit_code == 2 and "huge" in bad.stdout  # type: ignore[attr-defined]
    finally:
        service.close()


def test_alerts_need_credentials() -> None:
    result = runner.invoke(app, ["alerts", "--url", "http://127.0.0.1:9"], env={})
    assert result.exit_code == 2 and "credentials needed" in result.output
