"""The table renderer: nothing cut, columns left out by priority and named, TSV, colour."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.cli.tables import Column, fit, render, tsv

COLUMNS = (
    Column("job id", priority=0),
    Column("account", priority=3),
    Column("reported util", priority=1, numeric=True),
    Column("subject", priority=2, wrap=True),
    Column("verdict", priority=0),
)
ROW = ["41231234_17", "vision", "87 %", "/lustre/checkpoints/run-a/model.safetensors", "straggler"]


def test_in_a_pipe_every_column_shows_at_its_natural_width() -> None:
    text = render("Jobs", COLUMNS, [ROW], width=None)
    lines = text.splitlines()
    assert lines[0] == "Jobs"
    assert lines[1].split("  ")[0] == "job id" and "reported util" in lines[1]
    assert lines[3].split() == ["41231234_17", "vision", "87", "%", ROW[3], "straggler"]
    assert "Not shown" not in text


def test_a_narrow_terminal_wraps_headers_then_free_text_then_leaves_out_by_priority() -> None:
    natural = fit(COLUMNS, [ROW], None).total
    assert fit(COLUMNS, [ROW], natural).dropped == ()
    headers = fit(COLUMNS, [ROW], natural - 4)  # "reported util" on two lines
    assert headers.dropped == () and headers.widths[2] == len("reported")
    wrapped = fit(COLUMNS, [ROW], natural - 20)  # the subject wraps
    assert wrapped.dropped == () and wrapped.widths[3] < len(ROW[3])
    narrow = fit(COLUMNS, [ROW], 50)
    assert narrow.dropped == ("account",)  # priority 3 first
    assert fit(COLUMNS, [ROW], 30).dropped == ("account", "reported util", "subject")


def test_the_kept_columns_are_never_cut_even_wider_than_the_terminal() -> None:
    text = render(None, COLUMNS, [ROW], width=10)
    assert "41231234_17" in text.split() and "straggler" in text.split()
    assert "Not shown at 10 columns: account, reported util, subject" in " ".join(text.split())


def test_tsv_escapes_and_keeps_one_line_per_row() -> None:
    text = tsv(COLUMNS, [["1\t2", None, "a\nb", "c\\d", "ok"]])
    assert text == (
        "job id\taccount\treported util\tsubject\tverdict\n1\\t2\t\ta\\nb\tc\\\\d\tok\n"
    )


def test_colour_is_a_bold_header_only_when_asked() -> None:
    assert "\x1b[" not in render("T", COLUMNS, [ROW], width=None)
    coloured = render("T", COLUMNS, [ROW], width=None, color=True)
    assert coloured.splitlines()[0] == "\x1b[1mT\x1b[0m"


@given(
    width=st.integers(min_value=1, max_value=200),
    ids=st.lists(st.text("0123456789_+", min_size=1, max_size=14), min_size=1, max_size=5),
)
def test_every_kept_cell_shows_whole_at_any_width(width: int, ids: list[str]) -> None:
    rows = [[i, "nlp", "1 %", "x " * 30, "idle"] for i in ids]
    words = render("t", COLUMNS, rows, width=width).split()
    assert all(i in words for i in ids)
    layout = fit(COLUMNS, [[str(c) for c in r] for r in rows], width)
    assert {"job id", "verdict"}.isdisjoint(layout.dropped)
