"""The InfiniBand rates, resets and per-node series in their vectorised form give what the
plain forms give (a windowed ``shift().over(port)`` for the rates and resets, a Python loop
over port rows for the node series), on frames hypothesis draws in any row order."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.counters import counter_increase
from hpcscope.analysis.infiniband import counter_resets, in_port_order, port_rates
from hpcscope.analysis.telemetry_rules.residual import RX, TX, node_series

T0 = datetime(2026, 12, 1)
PORT = ["node", "device", "port"]
DATA = ["port_data_transmitted_bytes_total", "port_data_received_bytes_total"]

Row = tuple[str, str, int, int, int, int | None]

reads = st.lists(
    st.tuples(
        st.sampled_from(["gpu01", "gpu02"]),
        st.sampled_from(["mlx5_0", "mlx5_1"]),
        st.sampled_from([1, 2]),
        st.integers(0, 6),  # scrape slot
        st.integers(0, 50),  # transmitted (may go down: a reset)
        st.one_of(st.none(), st.integers(0, 50)),  # received (null: unknown)
    ),
    max_size=40,
    unique_by=lambda r: (r[0], r[1], r[2], r[3]),
)


def _frame(rows: list[Row]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=2 * r[3]) for r in rows],
            "node": [r[0] for r in rows],
            "device": [r[1] for r in rows],
            "port": pl.Series([r[2] for r in rows], dtype=pl.Int16),
            DATA[0]: pl.Series([float(r[4]) for r in rows], dtype=pl.Float64),
            DATA[1]: pl.Series([None if r[5] is None else float(r[5]) for r in rows],
                               dtype=pl.Float64),
        },
        schema_overrides={"ts": pl.Datetime("us")},
    )  # fmt: skip


def _reference_rates(counters: pl.DataFrame) -> pl.DataFrame:
    """The windowed form the vectorised one replaced."""
    frame = counters.sort([*PORT, "ts"])
    interval = (
        (pl.col("ts") - pl.col("ts").shift(1).over(PORT)).dt.total_microseconds() / 1e6
    ).alias("interval_seconds")
    rates = [
        (
            counter_increase(pl.col(c), pl.col(c).shift(1).over(PORT)) / pl.col("interval_seconds")
        ).alias(c.removesuffix("_total") + "_per_second")
        for c in DATA
    ]
    out = frame.with_columns(interval).with_columns(*rates)
    return out.filter(pl.col("interval_seconds").is_not_null() & (pl.col("interval_seconds") > 0))


def _resets(rows: list[Row]) -> list[tuple[str, str, int, datetime]]:
    """Reads whose transmitted counter is below the same port's read before."""
    out = []
    for r in rows:
        before = [q for q in rows if q[:3] == r[:3] and q[3] < r[3]]
        if before and r[4] < max(before, key=lambda q: q[3])[4]:
            out.append((r[0], r[1], r[2], T0 + timedelta(seconds=2 * r[3])))
    return out


@settings(max_examples=80, deadline=None)
@given(rows=reads, shuffle=st.randoms(use_true_random=False))
def test_rates_and_resets_equal_the_windowed_form(rows: list[Row], shuffle: random.Random) -> None:
    shuffle.shuffle(rows)
    frame = _frame(rows)
    got = port_rates(frame).select(*PORT, "ts", "interval_seconds", TX, RX)
    want = _reference_rates(frame).select(*PORT, "ts", "interval_seconds", TX, RX)
    assert got.to_dicts() == want.to_dicts()
    resets = counter_resets(frame)
    expected = sorted(_resets(rows))
    tx_resets = resets.filter(pl.col("counter") == DATA[0])
    assert sorted(tx_resets.select(*PORT, "ts").iter_rows()) == expected


@settings(max_examples=80, deadline=None)
@given(rows=reads, shuffle=st.randoms(use_true_random=False))
def test_in_port_order_sorts_once_and_drops_repeated_reads(
    rows: list[Row], shuffle: random.Random
) -> None:
    shuffle.shuffle(rows)
    frame = _frame(rows)
    twice = pl.concat([frame, frame.head(len(rows) // 2)])
    ordered = in_port_order(twice)
    assert ordered.to_dicts() == frame.sort([*PORT, "ts"]).to_dicts()
    assert in_port_order(ordered).to_dicts() == ordered.to_dicts()


@settings(max_examples=80, deadline=None)
@given(rows=reads)
def test_node_series_equals_the_loop_over_port_rows(rows: list[Row]) -> None:
    rates = port_rates(_frame(rows))
    got = node_series(rates)
    grouped: dict[tuple[str, datetime], list[tuple[str, int, float, float | None, float | None]]]
    grouped = {}
    for node, device, port, ts, interval, tx, rx in (
        rates.select(*PORT, "ts", "interval_seconds", TX, RX)
        .sort("node", "ts", "device", "port")
        .iter_rows()
    ):
        grouped.setdefault((node, ts), []).append((device, port, interval, tx, rx))
    want: dict[str, list[tuple[datetime, float, float, float, tuple[str, int], tuple[str, int]]]]
    want = {}
    for (node, ts), ports in grouped.items():
        if any(p[3] is None or p[4] is None for p in ports):
            continue
        top_tx = max(ports, key=lambda k: (k[3], k[0]))
        top_rx = max(ports, key=lambda k: (k[4], k[0]))
        want.setdefault(node, []).append(
            (ts, max(p[2] for p in ports), sum(p[3] for p in ports),  # type: ignore[misc]
             sum(p[4] for p in ports), (top_tx[0], top_tx[1]), (top_rx[0], top_rx[1]))  # type: ignore[misc]
        )  # fmt: skip
    assert {
        n: [(p.ts, p.interval_seconds, p.tx, p.rx, p.top_tx, p.top_rx) for p in points]
        for n, points in got.items()
    } == want
