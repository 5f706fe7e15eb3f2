"""Shared output helpers: JSON to stdout, tables, errors to stderr with exit codes.

Tables are plain text (:mod:`hpcscope.cli.tables`); Rich is imported only when styled text is
printed: a ``--json`` command does without it (``docs/benchmarks.md``, start-up). Typer only
when an error exits (its ``Exit``), and pydantic not at all: a contract can only reach
:func:`print_json` once pydantic is loaded, so a command line that
:mod:`hpcscope.cli.fast_path` runs needs neither.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, NotRequired, TypedDict

import orjson

from hpcscope.cli import tables
from hpcscope.cli.tables import Column
from hpcscope.model.errors import HpcscopeError, InputError, SourceError

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_RUNTIME_ERROR = 1
EXIT_USAGE_ERROR = 2


class ErrorBody(TypedDict):
    """The ``--json`` error document: the message, and where it was read when known."""

    error: str
    where: NotRequired[dict[str, object]]  # SourceError.to_dict: source, line, column, field


def stdout_console() -> Console:
    from rich.console import Console

    return Console(no_color=bool(os.environ.get("NO_COLOR")), soft_wrap=True)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")))


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
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
    *,
    numeric: Sequence[str] = (),
    fmt: str = "table",
) -> None:
    """Print a table on stdout (rules: :mod:`hpcscope.cli.tables`): fitted to the terminal,
    whole in a pipe, or as TSV with ``fmt="tsv"``.

    Args:
        columns: :class:`~hpcscope.cli.tables.Column` s, or plain headers (the first never
            left out, the others right to left; ``numeric`` names the right-aligned ones).
    """
    specs = tables.as_columns(columns, numeric)
    if fmt == "tsv":
        text = tables.tsv(specs, rows)
    else:
        width = tables.terminal_width()
        text = tables.render(title, specs, rows, width=width, color=tables.color_enabled())
    sys.stdout.write(text)
    sys.stdout.flush()


def fail(
    message: str,
    *,
    code: int = EXIT_RUNTIME_ERROR,
    as_json: bool = False,
    error: SourceError | None = None,
) -> NoReturn:
    """Report an error and exit: ``hpcscope: message`` on stderr (:func:`say_error`), and with
    ``--json`` also the JSON error document on stdout."""
    say_error(message)
    if as_json:
        body: ErrorBody = {"error": message}
        if error is not None:
            body["where"] = error.to_dict()
        print_json(body)
    import typer

    raise typer.Exit(code)


def say_error(message: str) -> None:
    """The one error style of every command: ``hpcscope: message``, one line on stderr."""
    text = " ".join(message.split()) or "error"
    sys.stderr.write(f"hpcscope: {text}\n")
    sys.stderr.flush()


def error_exit_code(error: HpcscopeError) -> int:
    """The exit code for an error no command handled: 2 for bad input, 1 for the rest.

    Bad input is what the person running the command can fix in the command line or the files
    it names (:class:`SourceError`, with its config and parse subclasses, and
    :class:`InputError`); everything else (store, access, scrape) is a runtime error.
    """
    if isinstance(error, SourceError | InputError):
        return EXIT_USAGE_ERROR
    return EXIT_RUNTIME_ERROR


def read_error_code(error: SourceError) -> int:
    """The exit code of a command whose input could not be read: 2 when it exceeded one of its
    reader's bounds (:class:`~hpcscope.model.bounds.BoundExceeded`: a cycle, nesting, values,
    size), else 1 (a runtime error: the file is unreadable or not in the format)."""
    return EXIT_USAGE_ERROR if getattr(error, "bound", None) is not None else EXIT_RUNTIME_ERROR


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

    say_error(error_line(error).removeprefix("hpcscope: "))
    if as_json:
        body: ErrorBody = {"error": error_line(error).removeprefix("hpcscope: ")}
        if isinstance(error, SourceError):
            body["where"] = error.to_dict()
        print_json(body)
    raise typer.Exit(error_exit_code(error))
