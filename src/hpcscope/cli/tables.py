"""Tables on a terminal, in a pipe and for scripts: never a cut id.

Every table of the CLI goes through :func:`render`. Its rules:

- A cell is never cut. A column is shown whole, wrapped (free text only: titles, subjects,
  details, marked ``wrap``) or left out; ids, job names, users, nodes and verdicts are marked
  ``priority=0`` and are never left out.
- On a terminal narrower than the table, headers first wrap at their spaces, then ``wrap``
  columns wrap down to :data:`WRAP_MIN` characters, then the columns of highest ``priority``
  (the least important; the rightmost first among equals) are left out until the table fits.
  A footer names the columns left out. When even the kept columns do not fit, the table is
  printed wider than the terminal (the terminal wraps the line; nothing is cut).
- When stdout is not a terminal (a pipe, a file), rows print whole: no width applies.
- ``--format tsv``: a header line and one line per row, tab-separated, no title or footer
  (:func:`tsv`): tabs, newlines and backslashes in a cell are written ``\\t``, ``\\n``, ``\\\\``.
- Colour (a bold header and title) only on a terminal, and never with ``NO_COLOR`` set.

This module imports neither Rich nor Typer: a table is plain text with a rule under its header.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpcscope.model.errors import InputError

#: The narrowest a ``wrap`` column gets before columns are left out.
WRAP_MIN = 16

#: Spaces between two columns.
GAP = 2

#: The values of ``--format``.
FORMATS = ("table", "tsv")

_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table.

    Args:
        header: what the column holds, with its unit (``"real efficiency (SM active)"``).
        priority: 0 never left out (ids, names, users, nodes, verdicts); above 0, left out
            on a narrow terminal, the highest first.
        numeric: right-aligned.
        wrap: free text that may wrap on a narrow terminal instead of being left out.
    """

    header: str
    priority: int = 1
    numeric: bool = False
    wrap: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    """Which columns show, at what width, and which were left out (by header)."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    dropped: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.widths) + GAP * max(0, len(self.widths) - 1)


def table_format(value: str) -> str:
    """The ``--format`` value, checked.

    Raises:
        InputError: not one of :data:`FORMATS` (a usage error, exit 2).
    """
    if value not in FORMATS:
        raise InputError(f"--format: {value!r} is not one of {', '.join(FORMATS)}")
    return value


def color_enabled() -> bool:
    """Colour on stdout: a terminal, and ``NO_COLOR`` unset or empty (no-color.org)."""
    return not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def terminal_width() -> int | None:
    """The terminal's width (``COLUMNS`` first), or None when stdout is not a terminal."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def cell_text(value: Any) -> str:
    """A cell as printed: ``—`` for None, one line (newlines and tabs become spaces)."""
    if value is None:
        return "—"
    return " ".join(str(value).split()) if any(c in str(value) for c in "\n\t\r") else str(value)


def _width(text: str) -> int:
    from unicodedata import east_asian_width

    return sum(2 if east_asian_width(c) in "WF" else 1 for c in text)


def _header_floor(header: str) -> int:
    return max((_width(word) for word in header.split()), default=0)


def fit(columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int | None) -> Layout:
    """The layout of a table of ``cells`` in ``width`` characters (None: no limit)."""
    longest = [max((_width(row[i]) for row in cells), default=0) for i in range(len(columns))]
    natural = [max(_width(c.header), longest[i]) for i, c in enumerate(columns)]
    compact = [max(_header_floor(c.header), longest[i]) for i, c in enumerate(columns)]
    floor = [
        max(_header_floor(c.header), min(compact[i], WRAP_MIN)) if c.wrap else compact[i]
        for i, c in enumerate(columns)
    ]
    shown = list(range(len(columns)))
    # the least important first: highest priority number, then the rightmost
    order = sorted(
        (i for i, c in enumerate(columns) if c.priority > 0),
        key=lambda i: (columns[i].priority, i),
        reverse=True,
    )
    while True:
        widths = _squeeze(shown, natural, compact, floor, width)
        if widths is not None or not order:
            break
        shown.remove(order.pop(0))
    if widths is None:  # the kept columns alone are too wide: wider than the terminal
        widths = [floor[i] for i in shown]
    dropped = tuple(c.header for i, c in enumerate(columns) if i not in shown)
    return Layout(tuple(shown), tuple(widths), dropped)


def _squeeze(
    shown: list[int], natural: list[int], compact: list[int], floor: list[int], width: int | None
) -> list[int] | None:
    """Widths of the ``shown`` columns within ``width``: natural, then wrapped headers, then
    wrapped free text (the widest first); None when even that does not fit."""
    gaps = GAP * max(0, len(shown) - 1)
    widths = [natural[i] for i in shown]
    if width is None or sum(widths) + gaps <= width:
        return widths
    widths = [compact[i] for i in shown]
    excess = sum(widths) + gaps - width
    if excess <= 0:
        # a header back on one line where the room allows, left to right (never half-grown)
        for k, i in enumerate(shown):
            grow = natural[i] - widths[k]
            if 0 < grow <= -excess:
                widths[k] += grow
                excess += grow
        return widths
    while excess > 0:
        room = [(widths[k] - floor[i], k) for k, i in enumerate(shown) if widths[k] > floor[i]]
        if not room:
            return None
        spare, k = max(room)
        take = min(spare, excess)
        widths[k] -= take
        excess -= take
    return widths


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def _line(parts: Sequence[str], widths: Sequence[int], numeric: Sequence[bool]) -> str:
    out = [
        " " * (w - _width(p)) + p if right else p + " " * (w - _width(p))
        for p, w, right in zip(parts, widths, numeric, strict=True)
    ]
    return (" " * GAP).join(out).rstrip()


def render(
    title: str | None,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None,
    color: bool = False,
) -> str:
    """The table as text (newline-terminated lines) for a terminal of ``width`` (None: rows
    whole, as in a pipe)."""
    cells = [[cell_text(v) for v in row] for row in rows]
    layout = fit(columns, cells, width)
    shown = [columns[i] for i in layout.shown]
    widths = layout.widths
    numeric = [c.numeric for c in shown]
    bold, dim, reset = (_BOLD, _DIM, _RESET) if color else ("", "", "")
    lines: list[str] = []
    if title:
        wrapped = [title] if width is None else _wrap(title, max(width, 20))
        lines += [f"{bold}{part}{reset}" for part in wrapped]
    headers = [_wrap(c.header, w) for c, w in zip(shown, widths, strict=True)]
    height = max((len(h) for h in headers), default=1)
    for level in range(height):  # headers bottom-aligned on the rule
        parts = [h[level - (height - len(h))] if level >= height - len(h) else "" for h in headers]
        lines.append(f"{bold}{_line(parts, widths, numeric)}{reset}")
    lines.append((" " * GAP).join("─" * w for w in widths))
    for row in cells:
        values = [row[i] for i in layout.shown]
        wrapped_cells = [
            _wrap(v, w) if c.wrap and _width(v) > w else [v]
            for v, c, w in zip(values, shown, widths, strict=True)
        ]
        for level in range(max(len(p) for p in wrapped_cells) if wrapped_cells else 1):
            parts = [p[level] if level < len(p) else "" for p in wrapped_cells]
            lines.append(_line(parts, widths, numeric))
    if layout.dropped:
        footer = (
            f"Not shown at {width} columns: {', '.join(layout.dropped)} (a wider terminal, "
            "a pipe, --format tsv or --json show them)"
        )
        lines += [f"{dim}{part}{reset}" for part in _wrap(footer, max(width or 0, 20))]
    return "".join(line + "\n" for line in lines)


def tsv(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> str:
    """A header line and one line per row, tab-separated (None: an empty cell)."""

    def escape(value: Any) -> str:
        text = "" if value is None else str(value)
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    lines = ["\t".join(escape(c.header) for c in columns)]
    lines += ["\t".join(escape(v) for v in row) for row in rows]
    return "".join(line + "\n" for line in lines)


def as_columns(columns: Sequence[str | Column], numeric: Sequence[str] = ()) -> list[Column]:
    """Plain headers as columns: the first kept always, the others left out right to left."""
    return [
        c if isinstance(c, Column) else Column(c, priority=0 if i == 0 else 1, numeric=c in numeric)
        for i, c in enumerate(columns)
    ]
