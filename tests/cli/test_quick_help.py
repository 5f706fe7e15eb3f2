"""``hpcscope --help`` drawn without Typer is byte for byte the page Typer draws.

Both pages come from fresh processes: the entry point's quick path (``python -m hpcscope
--help``: text, with colours on a terminal, from 40 columns; Rich below, or with ``NO_COLOR``)
and the Typer app itself, given the same program name, at terminal widths from 20 to 240
columns (click wraps the usage line at its own width, Rich the rest at the terminal's), with and
without forced colour, and on a real pseudo-terminal.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import hpcscope
from hpcscope.cli.main import COMMANDS, HELP
from hpcscope.cli.plain_help import plain_page, program_name, usage_line
from tests.cli.test_main import FORBIDDEN, importer_chains

_SRC = str(Path(hpcscope.__file__).parents[1])

#: Typer's own page, from the Typer app, as ``python -m hpcscope --help`` names the program.
_TYPER_HELP = (
    "import sys; sys.argv = ['hpcscope', '--help']; "
    "from hpcscope.cli.group import app; app(prog_name='python -m hpcscope')"
)


def _environ(**env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    environ.pop("NO_COLOR", None)
    environ.update(env, PYTHONPATH=_SRC)
    return environ


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = _environ(**env)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=environ, timeout=120
    )


@pytest.mark.parametrize("columns", ["20", "37", "45", "58", "80", "81", "100", "157", "240", ""])
@pytest.mark.parametrize("colour", ["", "1", "no"])
def test_the_quick_page_is_typers_page(columns: str, colour: str) -> None:
    env = {"NO_COLOR": "1"} if colour == "no" else {"FORCE_COLOR": colour} if colour else {}
    if columns:
        env["COLUMNS"] = columns
    quick = _run(["-m", "hpcscope", "--help"], **env)
    typer_page = _run(["-c", _TYPER_HELP], **env)
    assert quick.returncode == typer_page.returncode == 0, quick.stderr + typer_page.stderr
    assert "Commands" in quick.stdout and "traces" in quick.stdout
    assert ("\x1b[" in quick.stdout) == (colour == "1")
    assert quick.stdout == typer_page.stdout
    assert quick.stderr == typer_page.stderr == ""


_HEAVY = (*FORBIDDEN, "typer", "click", "pydantic", "numpy", "orjson", "hpcscope.cli.group")


def test_the_plain_page_imports_neither_typer_nor_rich() -> None:
    result = _run(["-X", "importtime", "-m", "hpcscope", "--help"], COLUMNS="100")
    assert result.returncode == 0, result.stderr[-2000:]
    chains = importer_chains(result.stderr, (*_HEAVY, "rich"))
    assert not chains, "`hpcscope --help` imports:\n" + "\n".join(chains)


def test_the_coloured_page_imports_neither_typer_nor_rich() -> None:
    result = _run(["-X", "importtime", "-m", "hpcscope", "--help"], COLUMNS="100", FORCE_COLOR="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\x1b[1;36m" in result.stdout
    chains = importer_chains(result.stderr, (*_HEAVY, "rich"))
    assert not chains, "`hpcscope --help` imports:\n" + "\n".join(chains)


@pytest.mark.parametrize("env", [{"COLUMNS": "30"}, {"COLUMNS": "100", "NO_COLOR": "1"}])
def test_the_rich_page_imports_rich_but_not_typer(env: dict[str, str]) -> None:
    result = _run(["-X", "importtime", "-m", "hpcscope", "--help"], **env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert importer_chains(result.stderr, ("rich.console",))
    chains = importer_chains(result.stderr, _HEAVY)
    assert not chains, "`hpcscope --help` imports:\n" + "\n".join(chains)


def _on_a_terminal(args: list[str]) -> bytes:
    """What ``python args`` writes to a pseudo-terminal (its stdout) at 100 columns."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=_environ(COLUMNS="100"),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=120) == 0
    return b"".join(chunks)


def test_on_a_terminal_the_quick_page_is_typers_page() -> None:
    quick = _on_a_terminal(["-m", "hpcscope", "--help"])
    assert b"\x1b[1;36m" in quick and b"traces" in quick
    assert quick == _on_a_terminal(["-c", _TYPER_HELP])


def test_what_plain_text_cannot_draw_is_left_to_rich() -> None:
    listing = {name: entry.help for name, entry in COMMANDS.items()}
    prog = "hpcscope"
    assert plain_page(HELP, listing, prog, 80) is not None
    assert plain_page(HELP, listing, prog, 39) is None  # Rich shrinks the fixed columns
    assert plain_page(HELP, {**listing, "x": "[bold]markup[/bold]"}, prog, 80) is None
    assert plain_page(HELP, {**listing, "x": "µs, not us"}, prog, 80) is None
    assert plain_page(HELP, {**listing, "x": "a" * 70}, prog, 80) is None  # Rich folds it
    assert plain_page(HELP, {**listing, "x": "see --json"}, prog, 80, colour=True) is None
    assert plain_page(HELP, {}, prog, 80) is None


def test_the_script_is_named_as_click_names_it(tmp_path: Path) -> None:
    script = tmp_path / "hpcscope"
    script.write_text("from hpcscope.cli.main import main\nmain()\n")
    result = _run([str(script), "--help"], COLUMNS="100")
    assert result.stdout.splitlines()[1].strip() == "Usage: hpcscope [OPTIONS] COMMAND [ARGS]..."


def test_program_names() -> None:
    class Main:
        __package__: str | None = None

    assert program_name("/usr/local/bin/hpcscope", None) == "hpcscope"
    script = Main()
    assert program_name("/opt/bin/hpcscope", script) == "hpcscope"  # type: ignore[arg-type]
    module = Main()
    module.__package__ = "hpcscope"
    assert program_name("/src/hpcscope/__main__.py", module) == "python -m hpcscope"  # type: ignore[arg-type]
    assert program_name("/src/hpcscope/cli.py", module) == "python -m hpcscope.cli"  # type: ignore[arg-type]


def test_a_long_program_name_puts_the_arguments_on_the_next_line() -> None:
    prog = "python -m a_very_long_package_name_for_a_usage_line"
    assert usage_line(prog).splitlines() == [
        f"Usage: {prog} ",
        "           [OPTIONS] COMMAND [ARGS]...",
    ]
