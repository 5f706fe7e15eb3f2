"""``hpcscope slo``: the server's scoped SLO document, as tables and as the /api/slo JSON."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from tests.service.slo.sacct_history import load_history, sacct_history
from tests.support.servers import live_server

runner = CliRunner()


def _invoke(url: str, user: str, *args: str) -> object:
    return runner.invoke(
        app,
        ["slo", "--url", url, "--user", user, "--password", f"{user}-demo", *args],
        env={"COLUMNS": "250"},
    )


def test_slo_through_a_server_is_scoped(tmp_path: Path) -> None:
    service = Service.open(
        Settings(store_path=tmp_path / "s.duckdb", secret_key="k"), users=UserDirectory.demo()
    )
    month_end = utcnow() - timedelta(days=1)
    load_history(service.store, sacct_history(now=month_end), now=month_end)
    try:
        with live_server(create_app(service)) as url:
            admin = _invoke(url, "admin", "--json")
            assert admin.exit_code == 0, admin.output  # type: ignore[attr-defined]
            cluster = json.loads(admin.stdout)  # type: ignore[attr-defined]
            assert cluster["scope"] == "cluster"
            assert [s["slo"] for s in cluster["slos"]] == [
                "queue_wait", "job_success", "gpu_efficiency",
            ]  # fmt: skip
            dave = json.loads(_invoke(url, "dave", "--json").stdout)  # type: ignore[attr-defined]
            assert dave["scope"] == "own jobs"
            assert [a["account"] for a in dave["accounts"]] == ["speech"]
            assert dave["slos"][1]["total"] < cluster["slos"][1]["total"]
            table = _invoke(url, "dave")
            out = table.stdout  # type: ignore[attr-defined]
            assert table.exit_code == 0  # type: ignore[attr-defined]
            assert "SLOs over own jobs, last 30 days" in out
            assert "Successful jobs" in out and "burn rate 1 h" in out and "p95 wait (min)" in out
            assert "node_failure" in out or "user_error" in out
    finally:
        service.close()


def test_slo_needs_credentials() -> None:
    result = runner.invoke(app, ["slo", "--url", "http://127.0.0.1:9"], env={})
    assert result.exit_code == 2 and "credentials needed" in result.output
