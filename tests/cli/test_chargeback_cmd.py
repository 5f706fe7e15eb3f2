"""``hpcscope chargeback``: the server's scoped chargeback as a table, as the /api/chargeback
JSON and as the CSV export, through a real server."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, demo_users
from tests.support.chargeback_data import write_chargeback_jobs
from tests.support.servers import live_server

runner = CliRunner()


def _invoke(url: str, user: str, *args: str) -> object:
    return runner.invoke(
        app,
        ["chargeback", "--url", url, "--user", user, "--password", f"{user}-demo", *args],
        env={"COLUMNS": "300"},
    )


def test_chargeback_through_a_server(tmp_path: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        secret_key="k",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
    )
    service = Service.open(settings, users=demo_users())
    write_chargeback_jobs(service.store)
    try:
        with live_server(create_app(service)) as url:
            admin = _invoke(url, "admin", "--by", "account", "--period", "2026-11", "--json")
            assert admin.exit_code == 0, admin.output  # type: ignore[attr-defined]
            document = json.loads(admin.stdout)  # type: ignore[attr-defined]
            assert document["period"] == "2026-11" and document["by"] == "account"
            assert math.isclose(document["total"]["allocated_gpu_hours"], 30.0)
            alice = json.loads(
                _invoke(url, "alice", "--period", "2026-11", "--by", "user", "--json").stdout  # type: ignore[attr-defined]
            )
            assert [r["key"] for r in alice["rows"]] == ["alice"]
            assert alice["scope"] == "jobs of alice"
            text = _invoke(url, "alice", "--period", "2026-11", "--csv").stdout  # type: ignore[attr-defined]
            lines = list(csv.DictReader(io.StringIO(text)))
            assert [line["key"] for line in lines] == ["vision", "(total)"]
            assert lines[-1]["allocated_gpu_hours"] == "24.000000"
            table = _invoke(url, "carol", "--period", "2026-11")
            assert table.exit_code == 0, table.output  # type: ignore[attr-defined]
            assert "vision" in table.stdout and "nlp" in table.stdout  # type: ignore[attr-defined]
            assert "speech" not in table.stdout  # type: ignore[attr-defined]
            bad = _invoke(url, "admin", "--period", "2026-13", "--json")
            assert bad.exit_code == 2 and "2026-13" in bad.stdout  # type: ignore[attr-defined]
            both = _invoke(url, "admin", "--json", "--csv")
            assert both.exit_code == 2  # type: ignore[attr-defined]
    finally:
        service.close()
