"""One rule for a cumulative counter's increase across resets, and every caller agrees."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.counters import counter_increase
from hpcscope.analysis.infiniband import port_rates
from hpcscope.analysis.jobs.efficiency import gpu_summary
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA

T0 = datetime(2026, 11, 29, 12, 0, 0)


@st.composite
def reads_with_resets(draw: st.DrawFn) -> tuple[list[float], float]:
    """Counter reads and the true total increase after the first read.

    Each step adds a non-negative amount, or (a reset) restarts the counter from zero, in which
    case the read is the amount added since the restart, drawn below the previous read so that
    the reset shows as a decrease."""
    first = draw(st.floats(0, 1e6))
    reads, total = [first], 0.0
    for _ in range(draw(st.integers(1, 30))):
        previous = reads[-1]
        if previous > 1 and draw(st.booleans()) and draw(st.booleans()):
            added = draw(st.floats(0, previous * 0.99))
            reads.append(added)
        else:
            added = draw(st.floats(0, 1e5))
            reads.append(previous + added)
        total += added
    return reads, total


def _increase_total(reads: list[float]) -> float:
    value = pl.col("v")
    frame = pl.DataFrame({"v": reads}).select(counter_increase(value, value.shift(1)).sum())
    return float(frame.item())


def test_a_decrease_is_a_restart_from_zero() -> None:
    value = pl.col("v")
    out = pl.DataFrame({"v": [10.0, 15.0, 4.0, 9.0]}).select(
        counter_increase(value, value.shift(1)).alias("inc")
    )
    assert out["inc"].to_list() == [None, 5.0, 4.0, 5.0]
    known = pl.DataFrame({"v": [10.0, 15.0], "r": [False, True]}).select(
        counter_increase(value, value.shift(1), restarted=pl.col("r")).alias("inc")
    )
    assert known["inc"].to_list() == [None, 15.0]


@settings(max_examples=50, deadline=None)
@given(reads_with_resets())
def test_every_counter_reader_recovers_the_true_increase(case: tuple[list[float], float]) -> None:
    reads, total = case
    assert abs(_increase_total(reads) - total) <= 1e-6 * max(1.0, total)
    times = [T0 + timedelta(seconds=15 * i) for i in range(len(reads))]
    # the InfiniBand reader: rate x interval summed over the intervals
    ports = pl.DataFrame(
        {
            "ts": times,
            "node": "n1",
            "device": "mlx5_0",
            "port": pl.Series([1] * len(reads), dtype=pl.Int16),
            "port_data_received_bytes_total": reads,
        }
    )
    rates = port_rates(ports)
    ib_total = float(
        (rates["port_data_received_bytes_per_second"] * rates["interval_seconds"]).sum()
    )
    # the GPU energy reader of the job report
    empty = pl.from_arrow(GPU_SAMPLE_SCHEMA.empty_table())
    assert isinstance(empty, pl.DataFrame)
    gpu = pl.DataFrame(
        {"ts": times, "node": "n1", "gpu": 0, "job_id": "1", "energy_joules": reads}
    ).select([pl.col(c).cast(t) if c in ("ts", "node", "gpu", "job_id", "energy_joules")
              else pl.lit(None, dtype=t).alias(c) for c, t in empty.schema.items()])  # fmt: skip
    energy = float(gpu_summary(gpu, max_interval_seconds=45.0)["energy_joules"].item())
    for reader_total in (ib_total, energy):
        assert abs(reader_total - total) <= 1e-6 * max(1.0, total)
