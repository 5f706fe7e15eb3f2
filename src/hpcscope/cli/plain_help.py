"""``hpcscope --help`` without Rich: the page Typer draws, as text or with its colours.

Typer's Rich page is usage, help, and two boxed tables whose last column wraps word by word; to
a pipe or a file it is plain text, to a terminal (or with ``FORCE_COLOR``) the same text with a
few fixed SGR styles (bold usage, dim borders, cyan commands). This module draws both with the
standard library alone (Rich's import is most of what is left of ``--help``'s cost,
``docs/benchmarks.md``). Whatever it cannot draw the same way (``NO_COLOR``, a dumb terminal,
Typer's or Rich's other environment switches, a width under 40 columns, a word wider than its
column, markup, option-like or non-ASCII text) it leaves to :mod:`hpcscope.cli.quick_help`
(Rich). ``tests/cli/test_quick_help.py`` checks both against Typer's page, byte for byte, at
widths from 20 to 240 columns, with and without colour.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Mapping
from types import ModuleType

#: What the root group's usage line shows after the program name (click's ``collect_usage_pieces``).
USAGE_ARGS = "[OPTIONS] COMMAND [ARGS]..."

#: The only option of the root group, as Typer describes it.
HELP_OPTION = ("--help", "<bool>", "Show this message and exit.")

#: Environment variables with which Typer or Rich may style, size or box the page otherwise
#: (``FORCE_COLOR`` is followed: colour when it is not empty).
STYLE_ENVIRONMENT = (
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "TERMINAL_WIDTH",
    "_TYPER_FORCE_DISABLE_TERMINAL",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
    "NO_COLOR",
)

#: Typer's option highlighter: pattern, group, and the SGR colour of its theme style (all bold).
_HIGHLIGHTS = (
    (re.compile(r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])"), "switch", "32"),
    (re.compile(r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])"), "option", "36"),
    (re.compile(r"(?P<types>\<[^\>]+\>)"), "types", "33"),
    (re.compile(r"(?P<usage>Usage: )"), "usage", "33"),
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


def terminal() -> tuple[int, bool] | None:
    """The width Rich would draw at and whether it would colour; None when only Rich knows.

    Rich's rules: a terminal is ``FORCE_COLOR`` (not empty) or a TTY on stdout; the width is
    ``COLUMNS`` when it is a number, else the first of stdin, stdout and stderr that is a
    terminal, else 80.
    """
    if any(name in os.environ for name in STYLE_ENVIRONMENT):
        return None
    stdout = sys.stdout
    if stdout is None:
        return None
    if not (stdout.encoding or "").lower().startswith("utf"):
        return None  # Rich would draw the boxes in ASCII
    force = os.environ.get("FORCE_COLOR")
    if force == "":
        return None
    try:
        colour = force is not None or stdout.isatty()
    except ValueError:
        return None
    if colour and os.environ.get("TERM", "").strip().lower() in ("dumb", "unknown"):
        return None
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
    return width or 80, colour


def _wrap(text: str, width: int) -> list[str] | None:
    """Rich's word wrap of plain single-spaced text, or None where Rich would fold a word."""
    if any(len(word) > width for word in text.split()):
        return None
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]


def _plain(text: str) -> bool:
    # Rich measures ASCII one cell a character; "[" may open markup; no highlighted pieces
    return (
        text.isascii()
        and text.isprintable()
        and "[" not in text
        and not any(pattern.search(text) for pattern, _, _ in _HIGHLIGHTS)
    )


def _usage(usage: str, width: int, sgr: _Sgr) -> list[str]:
    """The usage lines in Rich's bold padding, with the highlighter's pieces coloured."""
    spans = []
    for pattern, group, colour in _HIGHLIGHTS:
        for match in pattern.finditer(usage):
            start, end = match.span(group)
            if end > start:
                spans.append((start, end, colour))
    lines, offset = [], 0
    for line in usage.split("\n"):
        start, end = offset, offset + len(line)
        offset = end + 1
        cuts = sorted({start, end, *(p for s, e, _ in spans for p in (s, e) if start < p < end)})
        pieces = []
        for a, b in itertools.pairwise(cuts):
            covering = [colour for s, e, colour in spans if s <= a and b <= e]
            pieces.append(sgr("1" + (f";{covering[-1]}" if covering else ""), usage[a:b]))
        fill = sgr("1", " " * (width - 2 - len(line)))
        lines.append(sgr("1", " ") + "".join(pieces) + fill + sgr("1", " "))
    return lines


class _Sgr:
    """``text`` in one SGR style, as Rich writes a styled segment; plain without colour."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and text else text


def plain_page(
    app_help: str, commands: Mapping[str, str], prog: str, width: int, *, colour: bool = False
) -> str | None:
    """Typer's page at ``width`` columns (with its styles when ``colour``), or None when only
    Rich can draw it."""
    first = " ".join(app_help.split("\n\n")[0].split("\n")).strip()
    option, kind, option_help = HELP_OPTION
    texts = [first, option_help, *commands, *commands.values()]
    if width < MIN_COLUMNS or not all(_plain(t) for t in texts) or not commands:
        return None
    if not (prog.isascii() and prog.isprintable()) or (option, kind) != ("--help", "<bool>"):
        return None
    usage = usage_line(prog)
    help_lines = _wrap(first, width - 2)
    option_lines = _wrap(option_help, width - 4 - _OPTION_COLUMNS - 1)
    name_width = max(map(len, commands))
    text_width = width - 4 - name_width - 2
    command_lines = {name: _wrap(text.strip(), text_width) for name, text in commands.items()}
    if help_lines is None or option_lines is None:
        return None
    if any(len(u) > width - 2 for u in usage.split("\n")):
        return None
    if any(lines is None for lines in command_lines.values()):
        return None
    sgr = _Sgr(colour)
    inner = width - 4
    blank = sgr("1", " " * width)
    out = [blank, *_usage(usage, width, sgr), blank]
    out += [f" {line:<{width - 2}} " for line in help_lines]
    out.append(" " * width)

    def box(title: str, rows: list[str]) -> None:
        out.append(
            sgr("2", "╭─")
            + sgr("2", f" {title} ")
            + sgr("2", "─" * (width - len(title) - 6))
            + sgr("2", "─╮")
        )
        out.extend(sgr("2", "│") + f" {row} " + sgr("2", "│") for row in rows)
        out.append(sgr("2", "╰" + "─" * (width - 2) + "╯"))

    # "--help": the switch pattern styles "-help" and the option pattern all of it (one style)
    lead = (
        sgr("1;36", "-")
        + sgr("1;36", "-help")
        + " " * 8
        + sgr("1;2;33", "<")
        + sgr("1;33", "bool")
        + sgr("1;2;33", ">")
        + "  "
    )
    rows = [
        (lead if i == 0 else " " * 22) + line.ljust(inner - 22)
        for i, line in enumerate(option_lines)
    ]
    box("Options", rows)
    rows = []
    for name, lines in command_lines.items():
        assert lines is not None
        for i, line in enumerate(lines):
            if i == 0:
                cell = sgr("1;36", name.ljust(name_width)) + sgr("1;36", " ")
            else:
                cell = sgr("1;36", " " * (name_width + 1))
            rows.append(f"{cell} {line.ljust(text_width)}")
    box("Commands", rows)
    return "\n".join(out) + "\n\n"


def print_page(app_help: str, commands: Mapping[str, str]) -> bool:
    """Print the page without Rich; False (nothing printed) when Rich must draw it."""
    found = terminal()
    if found is None:
        return False
    width, colour = found
    prog = program_name(sys.argv[0], sys.modules.get("__main__"))
    page = plain_page(app_help, commands, prog, width, colour=colour)
    if page is None:
        return False
    sys.stdout.write(page)
    sys.stdout.flush()
    return True
