"""The lazy command group: ``--help`` lists every command without importing it, the static
help table matches each module's real help, and client commands import nothing heavy."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import hpcscope
from hpcscope.cli.main import COMMANDS, app, load_command
from tests.support.paths import FIXTURES

HTA_2RANK = FIXTURES / "traces" / "hta_trace_filter_2rank"

#: What a client command must never import: the web stack, the store's database, the
#: columnar libraries, the twin and the topology model (and the modules that pull them in).
FORBIDDEN = (
    "fastapi",
    "starlette",
    "uvicorn",
    "duckdb",
    "pyarrow",
    "polars",
    "pandas",
    "hpcscope.twin",
    "hpcscope.store",
    "hpcscope.serve",
    "hpcscope.model.topology",
)

#: Client commands (no server, no store) and what each may import on top of the shared base.
CLIENT_COMMANDS = {
    "help": ["--help"],
    "version": ["version", "--json"],
    "traces help": ["traces", "--help"],
    "traces analyze": ["traces", "analyze", str(HTA_2RANK), "--json"],
    "jobs": ["jobs", "--url", "http://127.0.0.1:9", "--user", "u", "--password", "p", "--json"],
    "job": ["job", "1", "--url", "http://127.0.0.1:9", "--user", "u", "--password", "p"],
    "token list": ["token", "list", "--url", "http://127.0.0.1:9", "--token", "hps_x"],
    "slo": ["slo", "--url", "http://127.0.0.1:9", "--user", "u", "--password", "p", "--json"],
    "alerts": ["alerts", "--url", "http://127.0.0.1:9", "--token", "hps_x", "--json"],
    "chargeback": ["chargeback", "--url", "http://127.0.0.1:9", "--token", "hps_x", "--json"],
    "access": ["access", "/x", "--url", "http://127.0.0.1:9", "--user", "u", "--password", "p"],
    "notify audit": ["notify", "audit", "--url", "http://127.0.0.1:9", "--token", "hps_x"],
    "traces merge": ["traces", "merge", str(HTA_2RANK), "--json"],
}


def _importtime(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``hpcscope ARGS`` in a fresh process under ``-X importtime`` (the import log on stderr)."""
    env = dict(os.environ, PYTHONPATH=str(Path(hpcscope.__file__).parents[1]), COLUMNS="100")
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hpcscope", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_help_table_matches_the_command_help(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert COMMANDS[name].help == _first_paragraph(command.help), (
        f"COMMANDS[{name!r}] in cli/main.py says {COMMANDS[name].help!r}; "
        f"{COMMANDS[name].module} says {_first_paragraph(command.help)!r}"
    )


def test_help_lists_every_command_with_its_help() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name, entry in COMMANDS.items():
        assert any(
            line.strip("│ ").startswith(f"{name} ") and entry.help in line for line in lines
        ), f"{name}: {entry.help!r} not in --help"


def test_help_is_what_registering_every_module_at_import_gave() -> None:
    # the app as it was before commands loaded lazily: every module registered up front
    eager = typer.Typer(
        name="hpcscope", help=app.info.help, no_args_is_help=True, add_completion=False
    )
    for module in dict.fromkeys(entry.module for entry in COMMANDS.values()):
        importlib.import_module(module).register(eager)
    env = {"COLUMNS": "100"}
    lazy = CliRunner().invoke(app, ["--help"], env=env).output
    assert "Usage:" in lazy and "traces" in lazy
    assert lazy == CliRunner().invoke(eager, ["--help"], env=env).output


def test_an_unknown_command_is_a_usage_error_with_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["trace", "analyze"])
    assert result.exit_code == 2
    assert "No such command 'trace'" in result.output and "'traces'" in result.output


def importer_chains(importtime: str, forbidden: tuple[str, ...]) -> list[str]:
    """Each forbidden module ``-X importtime`` shows, with the chain of modules that imported
    it (outermost first): ``duckdb <- hpcscope.store.core <- hpcscope.cli.main``.

    ``-X importtime`` prints a module after the modules it imported, indented one level
    deeper (two spaces) than its importer; so a module's importer is the first line after it
    that is indented less.
    """
    rows: list[tuple[int, str]] = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or line.endswith("| imported package"):
            continue
        name_field = line.rsplit("|", 1)[1]
        name = name_field.strip()
        rows.append(((len(name_field) - len(name_field.lstrip()) - 1) // 2, name))
    found: list[str] = []
    for i, (depth, name) in enumerate(rows):
        if not any(name == f or name.startswith(f + ".") for f in forbidden):
            continue
        chain, level = [name], depth
        for later_depth, later in rows[i + 1 :]:
            if later_depth < level:
                chain.append(later)
                level = later_depth
        found.append(" <- ".join(chain))
    return found


def test_importer_chains_name_the_importers() -> None:
    sample = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:        10 |         10 |     duckdb.core",
            "import time:        10 |         20 |   duckdb",
            "import time:        10 |         30 | hpcscope.store",
            "import time:        10 |         10 | numpy",
        ]
    )
    assert importer_chains(sample, ("duckdb",)) == [
        "duckdb.core <- duckdb <- hpcscope.store",
        "duckdb <- hpcscope.store",
    ]
    assert importer_chains(sample, ("polars",)) == []


@pytest.mark.parametrize("name", list(CLIENT_COMMANDS))
def test_a_client_command_imports_no_web_framework_store_or_twin(name: str) -> None:
    result = _importtime(CLIENT_COMMANDS[name])
    assert result.returncode in (0, 1), result.stderr[-2000:]  # 1: no server for jobs/job
    assert "Traceback" not in result.stderr
    chains = importer_chains(result.stderr, FORBIDDEN)
    assert not chains, f"`hpcscope {' '.join(CLIENT_COMMANDS[name])}` imports:\n" + "\n".join(
        chains
    )


#: Client commands asked for JSON: they print with orjson and need no Rich either.
JSON_COMMANDS = ("version", "traces analyze", "jobs", "slo", "alerts", "chargeback")


@pytest.mark.parametrize("name", JSON_COMMANDS)
def test_a_json_client_command_imports_no_rich(name: str) -> None:
    args = CLIENT_COMMANDS[name]
    assert "--json" in args
    result = _importtime(args)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    chains = importer_chains(result.stderr, ("rich",))
    assert not chains, f"`hpcscope {' '.join(args)}` imports:\n" + "\n".join(chains[:5])


@pytest.mark.parametrize("name", ["analyze", "merge"])
def test_an_ordinary_traces_command_line_imports_no_typer(name: str, tmp_path: Path) -> None:
    # hpcscope.cli.fast_path runs it: no Typer (nor its click), no pydantic, no numpy.ma
    paths = [str(HTA_2RANK)]
    if name == "merge":
        summarized = CliRunner().invoke(
            app, ["traces", "summarize", str(HTA_2RANK), "--out", str(tmp_path)]
        )
        assert summarized.exit_code == 0, summarized.output
        paths = [str(tmp_path)]
    result = _importtime(["traces", name, *paths, "--json"])
    assert result.returncode == 0, result.stderr[-2000:]
    # nor logging: the fast path runs before logging is configured (hpcscope.cli.main)
    chains = importer_chains(result.stderr, ("typer", "click", "pydantic", "numpy.ma", "logging"))
    assert not chains, f"`hpcscope traces {name}` imports:\n" + "\n".join(chains[:5])


@pytest.mark.parametrize("args", [["version"], ["version", "--json"]])
def test_version_prints_what_the_typer_command_prints_without_typer(args: list[str]) -> None:
    result = _importtime(args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not importer_chains(result.stderr, ("typer", "click", "pydantic"))
    typer_path = CliRunner().invoke(app, args)
    assert typer_path.exit_code == 0
    assert result.stdout == typer_path.output
