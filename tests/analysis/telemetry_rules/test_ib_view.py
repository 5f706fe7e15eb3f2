"""The rules' InfiniBand view built run by run is the view of the whole rows: a view of the
new rows with each port's last older row, merged at the cut, equals the whole view; pruning
keeps what is after the window's start and the calibration spans, nothing else."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.telemetry_rules.common import JobSpan
from hpcscope.analysis.telemetry_rules.ib_view import (
    CalibrationSpan,
    IbView,
    calibration_spans,
    ib_view,
    merged,
    pruned,
)

T0 = datetime(2026, 12, 1)
PORT = ["node", "device", "port"]
RISE = "port_constraint_errors_received_per_second"

Row = tuple[str, str, int, int, int, int, int]

reads = st.lists(
    st.tuples(
        st.sampled_from(["gpu01", "gpu02"]),
        st.sampled_from(["mlx5_0", "mlx5_1"]),
        st.sampled_from([1, 2]),
        st.integers(0, 12),  # scrape slot (2 s each)
        st.integers(0, 50),  # transmitted (may go down: a reset)
        st.integers(0, 50),  # received
        st.integers(0, 3),  # constraint errors received (RD-5)
    ),
    max_size=60,
    unique_by=lambda r: (r[0], r[1], r[2], r[3]),
)


def _frame(rows: list[Row]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=2 * r[3]) for r in rows],
            "node": [r[0] for r in rows],
            "device": [r[1] for r in rows],
            "port": pl.Series([r[2] for r in rows], dtype=pl.Int16),
            "port_data_transmitted_bytes_total": [float(r[4]) for r in rows],
            "port_data_received_bytes_total": [float(r[5]) for r in rows],
            "port_constraint_errors_received_total": [float(r[6]) for r in rows],
        },
        schema={"ts": pl.Datetime("us"), "node": pl.String, "device": pl.String,
                "port": pl.Int16, "port_data_transmitted_bytes_total": pl.Float64,
                "port_data_received_bytes_total": pl.Float64,
                "port_constraint_errors_received_total": pl.Float64},
    )  # fmt: skip


def _rows(frame: pl.DataFrame) -> list[dict[str, object]]:
    if frame.height == 0:
        return []
    return sorted(frame.to_dicts(), key=lambda r: (r["node"], r["device"], r["port"], r["ts"],
                                                   str(r.get("counter"))))  # fmt: skip


def _same(a: IbView, b: IbView) -> None:
    assert {n: list(p) for n, p in a.series.items()} == {n: list(p) for n, p in b.series.items()}
    assert _rows(a.rises) == _rows(b.rises)
    assert _rows(a.resets) == _rows(b.resets)


def _view(frame: pl.DataFrame, after: datetime | None = None) -> IbView:
    return ib_view(frame, after=after, rise_columns=[RISE])


@settings(max_examples=80, deadline=None)
@given(rows=reads, cut_slot=st.integers(0, 12))
def test_new_rows_with_each_ports_last_row_merged_at_the_cut_give_the_whole_view(
    rows: list[Row], cut_slot: int
) -> None:
    frame = _frame(rows)
    cut = T0 + timedelta(seconds=2 * cut_slot)
    older = frame.filter(pl.col("ts") <= cut)
    tail = older.sort([*PORT, "ts"]).unique(subset=PORT, keep="last", maintain_order=True)
    newer = pl.concat([tail, frame.filter(pl.col("ts") >= cut)])  # the cut's rows read again
    got = merged(_view(older), _view(newer, after=cut), after=cut)
    _same(got, _view(frame))


@settings(max_examples=80, deadline=None)
@given(rows=reads, since_slot=st.integers(0, 12), span=st.tuples(st.integers(0, 12),
                                                                  st.integers(0, 12)))  # fmt: skip
def test_pruned_keeps_the_window_and_the_calibration_spans(
    rows: list[Row], since_slot: int, span: tuple[int, int]
) -> None:
    frame = _frame(rows)
    since = T0 + timedelta(seconds=2 * since_slot)
    lo, hi = (T0 + timedelta(seconds=2 * s) for s in sorted(span))
    keep = [CalibrationSpan(nodes=("gpu02",), after=lo, until=hi)]
    whole = _view(frame)

    def wanted(node: str, ts: datetime) -> bool:
        return ts > since or (node == "gpu02" and lo < ts <= hi)

    got = pruned(whole, since=since, keep=keep)
    want = {n: [p for p in points if wanted(n, p.ts)] for n, points in whole.series.items()}
    assert {n: list(p) for n, p in got.series.items()} == {n: p for n, p in want.items() if p}
    for name in ("rises", "resets"):
        rows_got = _rows(getattr(got, name))
        rows_want = [
            r
            for r in _rows(getattr(whole, name))
            if isinstance(r["ts"], datetime) and wanted(str(r["node"]), r["ts"])
        ]
        assert rows_got == rows_want


@settings(max_examples=50, deadline=None)
@given(rows=reads, lo_slot=st.integers(0, 12), hi_slot=st.integers(0, 12))
def test_a_span_merged_into_a_view_replaces_only_its_nodes_and_range(
    rows: list[Row], lo_slot: int, hi_slot: int
) -> None:
    frame = _frame(rows)
    lo, hi = sorted((T0 + timedelta(seconds=2 * lo_slot), T0 + timedelta(seconds=2 * hi_slot)))
    only = frame.filter(pl.col("node") == "gpu01")
    without = frame.filter((pl.col("node") != "gpu01") | (pl.col("ts") <= lo)
                           | (pl.col("ts") > hi))  # fmt: skip
    span = _view(only.filter(pl.col("ts") <= hi), after=lo)
    got = merged(_view(without), span, after=lo, until=hi, nodes=["gpu01"])
    whole = _view(frame)
    # gpu01 inside the span is the whole view's; outside it, what `without` gave
    assert [p for p in got.series.get("gpu01", ()) if lo < p.ts <= hi] == [
        p for p in whole.series.get("gpu01", ()) if lo < p.ts <= hi
    ]
    assert got.series.get("gpu02") == _view(without).series.get("gpu02")


def test_calibration_spans_are_the_jobs_before_the_window() -> None:
    since = T0 + timedelta(minutes=60)
    jobs = [
        JobSpan("1", "u", "a", ("n1", "n2"), start=T0),
        JobSpan("2", "u", "a", ("n3",), start=since - timedelta(minutes=2)),  # calibrating
        JobSpan("3", "u", "a", ("n4",), start=since + timedelta(minutes=1)),  # in the window
        JobSpan("4", "u", "a", (), start=T0),  # no nodes known
    ]
    spans = calibration_spans(jobs, since=since, calibration_seconds=300, slot_seconds=15)
    assert spans == [
        CalibrationSpan(("n1", "n2"), T0 - timedelta(seconds=15), T0 + timedelta(seconds=315)),
        CalibrationSpan(("n3",), since - timedelta(seconds=135), since),
    ]
