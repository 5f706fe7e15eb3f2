"""``hpcscope --help`` as plain text, without Rich: the page Typer draws, when it has no style.

When the page goes to a pipe or a file (no terminal, no forced colour), Typer's Rich page is
plain text: usage, help, and two boxed tables whose last column wraps word by word. This
module draws that text with the standard library alone (Rich's import is most of what is left of
``--help``'s cost, ``docs/benchmarks.md``). Whatever it cannot draw the same way (a
terminal, colour, a width under 40 columns, a word wider than its column, markup or non-ASCII
text) it leaves to :mod:`hpcscope.cli.quick_help` (Rich). ``tests/cli/test_quick_help.py``
checks both against Typer's page, byte for byte, at widths from 20 to 240 columns.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Mapping
from types import ModuleType

#: What the root group's usage line shows after the program name (click's ``collect_usage_pieces``).
USAGE_ARGS = "[OPTIONS] COMMAND [ARGS]..."

#: The only option of the root group, as Typer describes it.
HELP_OPTION = ("--help", "<bool>", "Show this message and exit.")

#: Environment variables with which Typer or Rich may style, size or box the page otherwise.
STYLE_ENVIRONMENT = (
    "FORCE_COLOR",
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "TERMINAL_WIDTH",
    "_TYPER_FORCE_DISABLE_TERMINAL",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
)

#: Narrower than this, Rich shrinks the fixed columns too: left to Rich.
MIN_COLUMNS = 40

#: Width of the option table's columns before the help: ``--help``, three empty ones, the type.
_OPTION_COLUMNS = 21


def program_name(argv0: str, main_module: ModuleType | None) -> str:
    """How the program was started, as click names it: ``hpcscope`` or ``python -m hpcscope``."""
    package = getattr(main_module, "__package__", None)
    if package in (None, ""):
        return os.path.basename(argv0)
    name = os.path.splitext(os.path.basename(argv0))[0]
    module = str(package) if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"


def usage_line(prog: str) -> str:
    """click's usage line for the root group: wrapped at click's width, not Rich's."""
    width = max(min(shutil.get_terminal_size().columns, 80) - 2, 50)
    prefix = f"Usage: {prog} "
    if width >= len(prefix) + 20:
        indent = " " * len(prefix)
        text = textwrap.fill(
            USAGE_ARGS,
            width,
            initial_indent=prefix,
            subsequent_indent=indent,
            replace_whitespace=False,
        )
    else:
        indent = " " * (len("Usage: ") + 4)
        text = (
            prefix
            + "\n"
            + textwrap.fill(
                USAGE_ARGS,
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                replace_whitespace=False,
            )
        )
    return text


def plain_width() -> int | None:
    """The width Rich would draw at, when it would draw plain text; None when it would style.

    Rich's rule: ``COLUMNS`` when it is a number, else the first of stdin, stdout and stderr
    that is a terminal, else 80.
    """
    if any(name in os.environ for name in STYLE_ENVIRONMENT):
        return None
    stdout = sys.stdout
    if stdout is None or stdout.isatty():
        return None
    if not (stdout.encoding or "").lower().startswith("utf"):
        return None  # Rich would draw the boxes in ASCII
    columns = os.environ.get("COLUMNS")
    width: int | None = None
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    if columns is not None and columns.isdigit():
        width = int(columns)
    return width or 80


def _wrap(text: str, width: int) -> list[str] | None:
    """Rich's word wrap of plain single-spaced text, or None where Rich would fold a word."""
    if any(len(word) > width for word in text.split()):
        return None
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]


def _plain(text: str) -> bool:
    # Rich measures ASCII one cell a character; "[" may open markup
    return text.isascii() and text.isprintable() and "[" not in text


def plain_page(app_help: str, commands: Mapping[str, str], prog: str, width: int) -> str | None:
    """Typer's page as text at ``width`` columns, or None when only Rich can draw it."""
    first = " ".join(app_help.split("\n\n")[0].split("\n")).strip()
    texts = [first, prog, *commands, *commands.values()]
    if width < MIN_COLUMNS or not all(_plain(t) for t in texts) or not commands:
        return None
    usage = usage_line(prog).split("\n")
    help_lines = _wrap(first, width - 2)
    option, kind, option_help = HELP_OPTION
    option_lines = _wrap(option_help, width - 4 - _OPTION_COLUMNS - 1)
    name_width = max(map(len, commands))
    text_width = width - 4 - name_width - 2
    command_lines = {name: _wrap(text.strip(), text_width) for name, text in commands.items()}
    if help_lines is None or option_lines is None or any(len(u) > width - 2 for u in usage):
        return None
    if any(lines is None for lines in command_lines.values()):
        return None
    inner = width - 4
    blank = " " * width
    out = [blank, *(f" {u:<{width - 2}} " for u in usage), blank]
    out += [f" {line:<{width - 2}} " for line in help_lines]
    out.append(blank)

    def box(title: str, rows: list[str]) -> None:
        top = f"╭─ {title} "
        out.append(top + "─" * (width - len(top) - 1) + "╮")
        out.extend(f"│ {row:<{inner}} │" for row in rows)
        out.append("╰" + "─" * (width - 2) + "╯")

    lead = f"{option}{' ' * 8}{kind}  "
    box(
        "Options",
        [(lead if i == 0 else " " * len(lead)) + line for i, line in enumerate(option_lines)],
    )
    rows = []
    for name, lines in command_lines.items():
        assert lines is not None
        rows += [
            (f"{name:<{name_width}}  " if i == 0 else " " * (name_width + 2)) + line
            for i, line in enumerate(lines)
        ]
    box("Commands", rows)
    return "\n".join(out) + "\n\n"


def print_plain(app_help: str, commands: Mapping[str, str]) -> bool:
    """Print the page as plain text; False (nothing printed) when Rich must draw it."""
    width = plain_width()
    if width is None:
        return False
    prog = program_name(sys.argv[0], sys.modules.get("__main__"))
    page = plain_page(app_help, commands, prog, width)
    if page is None:
        return False
    sys.stdout.write(page)
    sys.stdout.flush()
    return True
