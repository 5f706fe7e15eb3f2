"""Command lines that run without Typer: ``hpcscope traces analyze`` and ``traces merge``.

Typer builds its commands from the functions' signatures and converts every argument with a
pydantic ``TypeAdapter``: importing Typer and pydantic and building the command costs more than
analysing a small trace (``docs/benchmarks.md``, start-up). So :func:`run` parses an ordinary
command line of these two commands itself and calls the same body
(:mod:`hpcscope.cli.traces_run`) with the same values Typer would pass.

It takes only what it is sure of: the options below, once each (``--kernel-classes`` may
repeat), values given as ``--name value`` or ``--name=value``, plain decimal numbers within
their range, and paths that pass Typer's checks (they exist, are readable, are not a directory
where a file is asked for). Anything else (``--help``, an unknown option, a missing or bad
value, shell completion) returns None and goes to Typer, which prints its own usage error or
help. ``tests/cli/test_fast_path.py`` checks the options against the Typer command's and the
output against Typer's, byte for byte.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hpcscope.model.errors import HpcscopeError


class FastOption(NamedTuple):
    """One option: the parameter it sets, its kind of value, and whether it may repeat.

    Kinds: ``flag`` (no value), ``ratio`` (a float in [0, 1]), ``count`` (an integer >= 1),
    ``input_file`` (an existing readable file), ``output_file`` (a path that is not a
    directory; readable if it exists).
    """

    dest: str
    kind: str
    multiple: bool = False


#: A value the light path passes to a runner: a flag, a ratio, a count, a path or a list of
#: paths (a repeated option), None where the option is absent.
OptionValue = bool | float | int | Path | list[Path] | None


class FastCommand(NamedTuple):
    """A command the light path runs: its options, their defaults, and what runs it."""

    options: dict[str, FastOption]
    defaults: dict[str, OptionValue]
    runner: str  # the function of hpcscope.cli.traces_run


_SHARED = {
    "--json": FastOption("json_output", "flag"),
    "--html": FastOption("html", "output_file"),
    "--threshold": FastOption("threshold", "ratio"),
    "--world-size": FastOption("world_size", "count"),
}
_SHARED_DEFAULTS: dict[str, OptionValue] = {
    "json_output": False,
    "html": None,
    "threshold": 0.75,
    "world_size": None,
}

#: The sub-commands of ``hpcscope traces`` the light path runs (the same options, names and
#: defaults as in :mod:`hpcscope.cli.traces_cmd`; a test compares them).
COMMANDS: dict[str, FastCommand] = {
    "analyze": FastCommand(
        {
            **_SHARED,
            "--workers": FastOption("workers", "count"),
            "--kernel-classes": FastOption("kernel_classes", "input_file", multiple=True),
        },
        {**_SHARED_DEFAULTS, "workers": None, "kernel_classes": []},
        "run_analyze",
    ),
    "merge": FastCommand(dict(_SHARED), dict(_SHARED_DEFAULTS), "run_merge"),
}

_RATIO = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_COUNT = re.compile(r"[1-9][0-9]{0,17}")


def _existing(value: str, *, dir_okay: bool) -> Path | None:
    """``value`` as Typer's ``Path(exists=True)`` takes it, or None where Typer would fail."""
    path = Path(value)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if (not dir_okay and stat.S_ISDIR(mode)) or not os.access(path, os.R_OK):
        return None
    return path


def _output(value: str) -> Path | None:
    """``value`` as Typer's ``Path(dir_okay=False)`` takes it (it need not exist)."""
    path = Path(value)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if stat.S_ISDIR(mode) or not os.access(path, os.R_OK):
        return None
    return path


def _convert(kind: str, value: str) -> float | int | Path | None:
    """The value Typer would pass, or None where the light path is not sure of it."""
    if not value or value.startswith("-"):
        return None
    if kind == "ratio":
        number = float(value) if _RATIO.fullmatch(value) else -1.0
        return number if 0.0 <= number <= 1.0 else None
    if kind == "count":
        return int(value) if _COUNT.fullmatch(value) else None
    if kind == "input_file":
        return _existing(value, dir_okay=False)
    return _output(value)


def parse(command: FastCommand, args: list[str]) -> dict[str, OptionValue] | None:
    """The keyword arguments of the command's runner, or None (Typer takes the command line)."""
    values: dict[str, OptionValue] = {
        k: list(v) if isinstance(v, list) else v for k, v in command.defaults.items()
    }
    paths: list[Path] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            path = _existing(token, dir_okay=True) if token else None
            if path is None:
                return None
            paths.append(path)
            continue
        name, equals, inline = token.partition("=")
        option = command.options.get(name)
        if option is None or (name in seen and not option.multiple):
            return None
        seen.add(name)
        if option.kind == "flag":
            if equals:
                return None
            values[option.dest] = True
            continue
        if not equals:
            if i == len(args):
                return None
            inline, i = args[i], i + 1
        value = _convert(option.kind, inline)
        if value is None:
            return None
        if option.multiple:
            current = values[option.dest]
            if not isinstance(current, list) or not isinstance(value, Path):
                return None  # only paths repeat: anything else is Typer's to word
            current.append(value)
        else:
            values[option.dest] = value
    if not paths:
        return None
    return {"paths": paths, **values}


def _completing() -> bool:
    # click's shell completion is asked for through a `_<PROG>_COMPLETE` variable
    return any(key.startswith("_") and key.endswith("_COMPLETE") for key in os.environ)


def run(argv: list[str]) -> int | None:
    """Run ``hpcscope <argv>`` without Typer and return its exit code; None when the command
    line is not one the light path takes (then Typer runs it)."""
    if len(argv) < 2 or argv[0] != "traces" or argv[1] not in COMMANDS or _completing():
        return None
    command = COMMANDS[argv[1]]
    arguments = parse(command, argv[2:])
    if arguments is None:
        return None
    # The trace analysis never calls BLAS; OpenBLAS otherwise starts a thread per core when
    # numpy is imported, which spins: about half of numpy's import CPU (0.07 of 0.14 s,
    # docs/benchmarks.md, issue 19). A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _import_quietly()
    from hpcscope.cli import traces_run

    runner: Callable[..., None] = getattr(traces_run, command.runner)
    return _invoke(runner, arguments, as_json="--json" in argv)


def _import_quietly() -> None:
    """Import what both commands run (numpy, msgspec, the parser and the analyses) with the
    cyclic garbage collector paused, then freeze what they built and resume it.

    The imports allocate ~24,000 container objects and free almost none: the ~60 collections
    they trigger found ~400 garbage objects and cost ~9 % of the imports' instructions
    (valgrind, issue 19). Frozen, those objects are never scanned again, nor written to by a
    collection in a forked parser (no copy-on-write of their pages), as :func:`gc.freeze`'s
    documentation advises before a fork.
    """
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        import hpcscope.cli.traces_run
        import hpcscope.service.traces.pipeline  # noqa: F401
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _invoke(
    runner: Callable[..., None], arguments: dict[str, OptionValue], *, as_json: bool
) -> int:
    """Call ``runner`` and handle what leaves it as Typer's group and main loop do."""
    try:
        try:
            runner(**arguments)
        except HpcscopeError as exc:  # as hpcscope.cli.group._Commands.invoke
            from hpcscope.cli.output import report_error

            report_error(exc, as_json=as_json)
    except KeyboardInterrupt:
        return 130
    except EOFError:  # as the group's main: a blank line, then "hpcscope: aborted"
        from hpcscope.cli.output import say_error

        print(file=sys.stderr)
        say_error("aborted")
        return 1
    except BrokenPipeError:
        from typer._click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        return 1
    except Exception as exc:
        import typer  # fail() and report_error() exit with typer.Exit: typer is loaded then

        if isinstance(exc, typer.Exit):
            return int(exc.exit_code)
        raise
    return 0
