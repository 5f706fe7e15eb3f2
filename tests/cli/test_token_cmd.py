"""``hpcscope token create|list|revoke`` against a real server, and the client commands
(``jobs``, ``alerts``) reading with ``HPCSCOPE_TOKEN`` instead of a password."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, demo_users
from tests.support.data import populate
from tests.support.servers import live_server

runner = CliRunner()
ENV = {"COLUMNS": "250", "HPCSCOPE_USER": "", "HPCSCOPE_PASSWORD": "", "HPCSCOPE_TOKEN": ""}


def _as(user: str) -> list[str]:
    return ["--user", user, "--password", f"{user}-demo"]


def test_create_list_use_and_revoke_a_token(tmp_path: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        secret_key="k",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
    )
    service = Service.open(settings, users=demo_users())
    populate(service.store, now=utcnow())
    try:
        with live_server(create_app(service)) as url:
            made = runner.invoke(
                app, ["token", "create", "--label", "nightly", "--url", url, *_as("alice")], env=ENV
            )
            assert made.exit_code == 0, made.output
            secret = made.stdout.strip()
            assert re.fullmatch(r"hps_[0-9A-Za-z]{46}", secret), made.stdout
            assert "shown once" in made.stderr
            # the client commands read with the token, from the environment
            by_token = runner.invoke(
                app, ["jobs", "--url", url, "--json"], env={**ENV, "HPCSCOPE_TOKEN": secret}
            )
            by_password = runner.invoke(
                app, ["jobs", "--url", url, "--json", *_as("alice")], env=ENV
            )
            assert by_token.exit_code == 0, by_token.output
            ids = {j["job_id"] for j in json.loads(by_token.stdout)["jobs"]}
            assert ids and ids == {j["job_id"] for j in json.loads(by_password.stdout)["jobs"]}
            alerts = runner.invoke(app, ["alerts", "--url", url, "--token", secret], env=ENV)
            assert alerts.exit_code == 0, alerts.output
            # a read token cannot make another token (exit 1, one line)
            more = runner.invoke(
                app, ["token", "create", "--label", "x", "--url", url, "--token", secret], env=ENV
            )
            assert more.exit_code == 1 and "read-only" in more.stderr
            # nor a researcher an admin one
            admin_scope = runner.invoke(
                app,
                ["token", "create", "--label", "x", "--scope", "admin", "--url", url, *_as("bob")],
                env=ENV,
            )
            assert admin_scope.exit_code == 1 and "admin" in admin_scope.stderr
            listed = runner.invoke(
                app, ["token", "list", "--url", url, "--json", *_as("alice")], env=ENV
            )
            document = json.loads(listed.stdout)
            assert document["count"] == 1 and document["tokens"][0]["label"] == "nightly"
            assert secret not in listed.stdout
            table = runner.invoke(app, ["token", "list", "--url", url, *_as("alice")], env=ENV)
            assert "nightly" in table.stdout and secret[:12] in table.stdout
            assert runner.invoke(app, ["token", "list", "--url", url, "--json", *_as("bob")],
                                 env=ENV).stdout.count("nightly") == 0  # fmt: skip
            # revoke by the whole token pasted (its id is taken from it)
            revoked = runner.invoke(
                app, ["token", "revoke", secret, "--url", url, "--json", *_as("alice")], env=ENV
            )
            assert revoked.exit_code == 0, revoked.output
            assert json.loads(revoked.stdout)["status"] == "revoked"
            refused = runner.invoke(app, ["jobs", "--url", url, "--token", secret], env=ENV)
            assert refused.exit_code == 1 and "authentication failed" in refused.stderr
            unknown = runner.invoke(app, ["token", "revoke", "ZZZZZZZZ", "--url", url, *_as("bob")],
                                    env=ENV)  # fmt: skip
            assert unknown.exit_code == 1 and "no such token" in unknown.stderr
            bad = runner.invoke(
                app,
                ["token", "create", "--label", "x", "--expires-days", "9999", "--url", url,
                 *_as("alice")],
                env=ENV,
            )  # fmt: skip
            assert bad.exit_code == 2 and "at most 365" in bad.stderr
    finally:
        service.close()


def test_no_credentials_is_a_usage_error() -> None:
    result = runner.invoke(app, ["token", "list", "--url", "http://127.0.0.1:9"], env=ENV)
    assert result.exit_code == 2 and "HPCSCOPE_TOKEN" in result.stderr
