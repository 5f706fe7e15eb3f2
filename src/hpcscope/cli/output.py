"""Shared output helpers: JSON to stdout, tables with Rich, errors to stderr with exit codes.

Rich is imported only when a table or a styled error is printed: a ``--json`` command does
without it (``docs/benchmarks.md``, start-up). Typer only when an error exits (its ``Exit``),
and pydantic not at all: a contract can only reach :func:`print_json` once pydantic is loaded,
so a command line that :mod:`hpcscope.cli.fast_path` runs needs neither.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from hpcscope.model.errors import HpcscopeError, InputError, SourceError

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_RUNTIME_ERROR = 1
EXIT_USAGE_ERROR = 2


def stdout_console() -> Console:
    from rich.console import Console

    return Console(no_color="NO_COLOR" in os.environ, soft_wrap=True)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color="NO_COLOR" in os.environ)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON (one document, newline-terminated) to stdout.

    A contract (a pydantic model of ``service/*/contracts.py``) is written as it serialises,
    without the optional keys it was built without.
    """
    pydantic = sys.modules.get("pydantic")  # a contract exists only once pydantic is loaded
    if pydantic is not None and isinstance(data, pydantic.BaseModel):
        data = data.model_dump(mode="json", exclude_unset=True)
    sys.stdout.buffer.write(
        orjson.dumps(
            data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        )
        + b"\n"
    )
    sys.stdout.flush()


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    numeric: Sequence[str] = (),
) -> None:
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in numeric else "left")
    for row in rows:
        table.add_row(*["—" if cell is None else str(cell) for cell in row])
    stdout_console().print(table)


def fail(
    message: str,
    *,
    code: int = EXIT_RUNTIME_ERROR,
    as_json: bool = False,
    error: SourceError | None = None,
) -> NoReturn:
    """Report an error (stderr, or a JSON error document on stdout with --json) and exit."""
    if as_json:
        body: dict[str, Any] = {"error": message}
        if error is not None:
            body["where"] = error.to_dict()
        print_json(body)
    else:
        stderr_console().print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    import typer

    raise typer.Exit(code)


def error_exit_code(error: HpcscopeError) -> int:
    """The exit code for an error no command handled: 2 for bad input, 1 for the rest.

    Bad input is what the person running the command can fix in the command line or the files
    it names (:class:`SourceError`, with its config and parse subclasses, and
    :class:`InputError`); everything else (store, access, scrape) is a runtime error.
    """
    if isinstance(error, SourceError | InputError):
        return EXIT_USAGE_ERROR
    return EXIT_RUNTIME_ERROR


def error_line(error: HpcscopeError) -> str:
    """One line for stderr: ``hpcscope: <source>:<line>:<col>: message`` where known."""
    text = error.describe() if isinstance(error, SourceError) else str(error)
    text = " ".join(text.split()) or type(error).__name__  # one line, never empty
    return f"hpcscope: {text}"


def report_error(error: HpcscopeError, *, as_json: bool = False) -> NoReturn:
    """Print :func:`error_line` on stderr (no traceback) and exit with :func:`error_exit_code`.

    With ``as_json``, the error is also the JSON document on stdout, as :func:`fail` writes it:
    ``{"error": message, "where": {source, line, column, field, message}}``.
    """
    import typer

    typer.echo(error_line(error), err=True)
    if as_json:
        body: dict[str, Any] = {"error": error_line(error).removeprefix("hpcscope: ")}
        if isinstance(error, SourceError):
            body["where"] = error.to_dict()
        print_json(body)
    raise typer.Exit(error_exit_code(error))
