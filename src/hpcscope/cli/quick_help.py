"""``hpcscope --help`` without Typer: the same page, drawn with Rich alone.

Importing Typer 0.29 costs about as much as the rest of ``--help`` together (its pydantic
coercion layer, ``typer.rich_utils`` with Markdown): ``docs/benchmarks.md``. The top-level help
page only lists :data:`~hpcscope.cli.main.COMMANDS`, so it is drawn here from that table with
the Rich renderables, styles and widths Typer's ``rich_format_help`` uses for it. The click
usage line is wrapped as click's ``HelpFormatter.write_usage`` wraps it.
``tests/cli/test_quick_help.py`` checks that the page is byte for byte Typer's, at every
terminal width from 20 to 240 columns, with and without colour.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from rich.align import Align
from rich.columns import Columns
from rich.console import Console, Group
from rich.highlighter import RegexHighlighter
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from hpcscope.cli.plain_help import HELP_OPTION, program_name, usage_line


class _OptionHighlighter(RegexHighlighter):
    """Typer's ``OptionHighlighter``: options, switches, types and the usage prefix."""

    highlights = [  # noqa: RUF012 (Rich's class attribute)
        r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])",
        r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
        r"(?P<types>\<[^\>]+\>)",
        r"(?P<usage>Usage: )",
    ]


class _TypesHighlighter(RegexHighlighter):
    """Typer's ``TypesHighlighter``: brackets and separators of a type dimmed."""

    highlights = [  # noqa: RUF012 (Rich's class attribute)
        r"^(?P<types_sep>(\[|<))",
        r"(?P<types_sep>\|)",
        r"(?P<types_sep>(\]|>))(\.\.\.)?$",
    ]


_THEME = {
    "option": "bold cyan",
    "switch": "bold green",
    "negative_option": "bold magenta",
    "negative_switch": "bold red",
    "types": "bold yellow",
    "types_sep": "dim",
    "usage": "yellow",
}


def _console() -> Console:
    # Typer's console: FORCE_COLOR / PY_COLORS / GITHUB_ACTIONS force a terminal,
    # _TYPER_FORCE_DISABLE_TERMINAL disables it, TERMINAL_WIDTH fixes the width
    force: bool | None = (
        True
        if os.getenv("GITHUB_ACTIONS") or os.getenv("FORCE_COLOR") or os.getenv("PY_COLORS")
        else None
    )
    if os.getenv("_TYPER_FORCE_DISABLE_TERMINAL"):
        force = False
    fixed = os.getenv("TERMINAL_WIDTH")
    return Console(
        theme=Theme(_THEME),
        highlighter=_OptionHighlighter(),
        color_system="auto",
        force_terminal=force,
        width=int(fixed) if fixed else None,
    )


def _panel(table: Table, title: str) -> Panel:
    return Panel(table, border_style="dim", title=title, title_align="left")


def print_help(app_help: str, commands: Mapping[str, str]) -> None:
    """Print the root help page: usage, ``app_help``, the options, then ``commands``
    (name to one-line help) in order."""
    console = _console()
    highlight = _OptionHighlighter()
    prog = program_name(sys.argv[0], sys.modules.get("__main__"))
    console.print(Padding(highlight(usage_line(prog)), 1), style="bold")
    first = " ".join(app_help.split("\n\n")[0].split("\n")).strip()
    help_text = Group(highlight(Text.from_markup(first, style="")))
    console.print(Padding(Align(help_text, pad=False), (0, 1, 1, 1)))

    option, kind, option_help = HELP_OPTION
    options = Table(
        highlight=True,
        show_header=False,
        expand=True,
        box=None,
        show_lines=False,
        leading=0,
        border_style=None,
        row_styles=None,
        pad_edge=False,
        padding=(0, 1),
    )
    options.add_row(
        highlight(option),
        highlight(""),
        highlight(""),
        highlight(""),
        _TypesHighlighter()(Text(kind, style="bold yellow", overflow="fold")),
        Columns([highlight(Text.from_markup(option_help, style=""))]),
    )
    console.print(_panel(options, "Options"))

    table = Table(
        highlight=False,
        show_header=False,
        expand=True,
        box=None,
        show_lines=False,
        leading=0,
        border_style=None,
        row_styles=None,
        pad_edge=False,
        padding=(0, 1),
    )
    table.add_column(style="bold cyan", no_wrap=True, width=max(map(len, commands), default=0))
    table.add_column("Description", justify="left", no_wrap=False, ratio=10)
    for name, text in commands.items():
        table.add_row(Text(name), highlight(Text.from_markup(text.strip(), style="")))
    if table.row_count:
        console.print(_panel(table, "Commands"))
    print()  # click echoes the (empty) rest of its formatter: one more line
