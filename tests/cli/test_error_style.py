"""One error style for every command: ``hpcscope: ...``, one line on stderr, exit 1 or 2.

Every command of the Typer tree is run with an unknown option (a usage error, exit 2); then
each command's own error paths: missing credentials (2), an unreachable server (1), a refused
login (1), an id not visible (1), a denial (1), bad input files and values (2), runtime
failures (1). The line is always ``hpcscope: `` and a message, never a traceback, never Rich's
boxes; with ``--json`` the error is also the JSON document on stdout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.cli.output import EXIT_RUNTIME_ERROR, EXIT_USAGE_ERROR
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import DEMO_PASSWORDS, demo_users
from tests.support.data import populate
from tests.support.servers import free_port, live_server

runner = CliRunner()
#: the environment of every run: no credentials from the developer's shell
ENV = {"HPCSCOPE_USER": "", "HPCSCOPE_PASSWORD": "", "HPCSCOPE_TOKEN": "", "HPCSCOPE_URL": ""}


def _leaves(group: typer.Typer) -> list[list[str]]:
    command = get_command(group)
    found: list[list[str]] = []
    for name, sub in getattr(command, "commands", {}).items():
        children = getattr(sub, "commands", None)
        if children:
            found += [[name, child] for child in children]
        else:
            found.append([name])
    return found


def _one_line(result: object, code: int, starts: str = "hpcscope: ") -> str:
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert lines[0].startswith(starts), lines[0]
    assert "Traceback" not in result.output and "╭" not in result.output  # type: ignore[attr-defined]
    return str(lines[0])


@pytest.mark.parametrize("command", _leaves(app), ids=" ".join)
def test_an_unknown_option_is_a_one_line_usage_error(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--no-such-option"], env=ENV)
    line = _one_line(result, EXIT_USAGE_ERROR, f"hpcscope: {' '.join(command)}: ")
    assert "--no-such-option" in line and f"see 'hpcscope {' '.join(command)} --help'" in line


def test_an_unknown_command_and_a_missing_argument() -> None:
    _one_line(runner.invoke(app, ["no-such-command"]), EXIT_USAGE_ERROR)
    line = _one_line(runner.invoke(app, ["job"], env=ENV), EXIT_USAGE_ERROR, "hpcscope: job: ")
    assert "Missing argument" in line


#: the client commands, each with the arguments it needs
CLIENTS = [
    ["jobs"], ["job", "101"], ["job", "report", "101"], ["alerts"], ["slo"], ["chargeback"],
    ["access", "/lustre/checkpoints"], ["notify", "audit"], ["notify", "preferences"],
    ["token", "list"], ["token", "create", "--label", "x"], ["token", "revoke", "abcdefgh"],
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("errors") / "s.duckdb"
    service = Service.open(Settings(store_path=path, secret_key="k"), users=demo_users())
    populate(service.store, now=utcnow())
    try:
        with live_server(create_app(service)) as url:
            yield url
    finally:
        service.close()


@pytest.mark.parametrize("command", CLIENTS, ids=" ".join)
def test_client_commands_fail_in_one_style(server: str, command: list[str]) -> None:
    none = runner.invoke(app, [*command, "--url", server], env=ENV)
    assert "credentials needed" in _one_line(none, EXIT_USAGE_ERROR)
    as_json = runner.invoke(app, [*command, "--url", server, "--json"], env=ENV)
    _one_line(as_json, EXIT_USAGE_ERROR)
    assert json.loads(as_json.stdout)["error"].startswith("credentials needed")
    away = f"http://127.0.0.1:{free_port()}"
    auth = ["--user", "alice", "--password", DEMO_PASSWORDS["alice"]]
    unreachable = runner.invoke(app, [*command, "--url", away, *auth], env=ENV)
    assert f"cannot reach {away}" in _one_line(unreachable, EXIT_RUNTIME_ERROR)
    refused = runner.invoke(app, [*command, "--url", server, "--token", "hps_wrong"], env=ENV)
    assert "authentication failed (token)" in _one_line(refused, EXIT_RUNTIME_ERROR)


def test_a_refused_then_throttled_login(tmp_path: Path) -> None:
    # a server of its own: the throttle holds the address for a minute
    service = Service.open(Settings(store_path=tmp_path / "s.duckdb"), users=demo_users())
    try:
        with live_server(create_app(service)) as url:
            wrong = ["--url", url, "--user", "dave", "--password", "wrong"]
            first = runner.invoke(app, ["jobs", *wrong], env=ENV)
            assert _one_line(first, EXIT_RUNTIME_ERROR) == "hpcscope: authentication failed"
            for _ in range(30):  # the login guard answers 429 once the failures pile up
                last = runner.invoke(app, ["jobs", *wrong], env=ENV)
                if "authentication failed" not in last.stderr:
                    break
            assert "too many failed logins" in _one_line(last, EXIT_RUNTIME_ERROR)
    finally:
        service.close()


def test_denials_and_ids_not_visible_are_runtime_errors(server: str) -> None:
    bob = ["--url", server, "--user", "bob", "--password", DEMO_PASSWORDS["bob"]]
    _one_line(runner.invoke(app, ["job", "101", *bob], env=ENV), EXIT_RUNTIME_ERROR)
    _one_line(runner.invoke(app, ["job", "999", *bob], env=ENV), EXIT_RUNTIME_ERROR)
    _one_line(runner.invoke(app, ["notify", "audit", *bob], env=ENV), EXIT_RUNTIME_ERROR)
    bad_period = runner.invoke(app, ["chargeback", "--period", "someday", *bob], env=ENV)
    assert "someday" in bad_period.stderr
    _one_line(bad_period, EXIT_USAGE_ERROR)
    bad_format = runner.invoke(app, ["alerts", "--format", "xml", *bob], env=ENV)
    assert "--format" in _one_line(bad_format, EXIT_USAGE_ERROR)


def test_offline_commands_fail_in_one_style(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    not_a_store = tmp_path / "not.duckdb"
    not_a_store.write_bytes(b"not a DuckDB file\n" * 200)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("- not a mapping\n")
    cases: list[tuple[list[str], int]] = [
        (["traces", "analyze", str(missing)], EXIT_USAGE_ERROR),
        (["traces", "merge", str(missing)], EXIT_USAGE_ERROR),
        (["traces", "summarize", str(missing), "--out", str(tmp_path)], EXIT_USAGE_ERROR),
        (["nccl", "analyze", str(missing)], EXIT_RUNTIME_ERROR),
        (["simulate", "--gpus", "0"], EXIT_USAGE_ERROR),
        (["deploy", "tetragon", "--topology", str(bad_yaml)], EXIT_USAGE_ERROR),
        (["store", "upkeep", "--store", str(not_a_store)], EXIT_RUNTIME_ERROR),
        (["jobs", "--store", str(not_a_store)], EXIT_RUNTIME_ERROR),
        (["serve", "--config", str(bad_yaml), "--for", "1s"], EXIT_USAGE_ERROR),
        (["demo", "--topology", "no-such-topology", "--for", "1s"], EXIT_USAGE_ERROR),
        (["twin", "run", "--topology", "no-such-topology"], EXIT_USAGE_ERROR),
        (["twin", "dcgm-endpoint", "--node", "n", "--mapping-dir", str(tmp_path),
          "--profile", "no-such-profile"], EXIT_USAGE_ERROR),
        (["twin", "attack", "no-such-scenario", "--falco", str(tmp_path / "f.json")],
         EXIT_USAGE_ERROR),
        (["sensor", "--topology", str(bad_yaml), "--print-program"], EXIT_USAGE_ERROR),
    ]  # fmt: skip
    for args, code in cases:
        result = runner.invoke(app, args, env=ENV)
        _one_line(result, code)
        assert result.stdout == "" or args[0] == "demo", (args, result.stdout)
