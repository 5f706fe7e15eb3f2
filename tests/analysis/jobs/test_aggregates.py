"""A report's GPU rows from per-GPU aggregates equal those from the raw samples they sum.

The aggregates are made here from the samples the way the engine recording rules make them
(sums and counts, samples x interval, the counter's rise, maxima, seconds with a slowdown or a
thermal reason, the Xid seen to change); with regular scrapes every figure of
:func:`gpu_summary` comes back: means, GPU-seconds, energy, maxima, slowdown share and the
verdicts (the straggler's among them).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.jobs.aggregates import THERMAL_BIT, summary_from_aggregates
from hpcscope.analysis.jobs.efficiency import (
    THROTTLE_SLOWDOWN_MASK,
    THROTTLE_THERMAL_MASK,
    gpu_summary,
)
from hpcscope.model.backends import AGGREGATE_MEANS, GPU_AGGREGATE_SCHEMA

T0 = datetime(2026, 3, 1, 12, 0, 0)
INTERVAL = 15.0


@st.composite
def job_samples(draw: st.DrawFn) -> pl.DataFrame:
    gpus = draw(st.integers(1, 6))
    steps = draw(st.integers(2, 30))
    rows = []
    for gpu in range(gpus):
        level = draw(st.floats(0.0, 1.0))
        energy = draw(st.floats(0.0, 1e9))
        for step in range(steps):
            energy += draw(st.floats(0.0, 10_000.0))
            rows.append(
                {
                    "ts": T0 + timedelta(seconds=INTERVAL * step),
                    "job_id": "7",
                    "node": f"gpu{gpu // 4:02d}",
                    "gpu": gpu % 4,
                    "gpu_instance_id": None,
                    "reported_util_ratio": min(1.0, level + draw(st.floats(0.0, 0.2))),
                    "sm_active_ratio": draw(st.floats(0.0, 1.0)) * level,
                    "tensor_active_ratio": level / 2,
                    "sm_occupancy_ratio": level / 3,
                    "dram_active_ratio": level / 4,
                    "power_watts": 100 + 500 * level,
                    "sm_clock_hertz": 1.98e9,
                    "energy_joules": energy,
                    "gpu_temperature_celsius": draw(st.floats(30.0, 90.0)),
                    "fb_used_bytes": draw(st.floats(0.0, 8e10)),
                    "clock_throttle_reasons": draw(st.sampled_from([0, 0, 0x8, 0x20, 0x28])),
                    "xid_last": 0,
                }
            )
    return pl.DataFrame(rows).with_columns(
        pl.col("gpu").cast(pl.Int16), pl.col("gpu_instance_id").cast(pl.Int16)
    )


def _aggregates(samples: pl.DataFrame) -> pl.DataFrame:
    """What the engine rules sum over a window holding every sample."""
    keys = ["job_id", "node", "gpu", "gpu_instance_id"]
    reasons = pl.col("clock_throttle_reasons")
    table = samples.group_by(keys).agg(
        (pl.len() * INTERVAL).cast(pl.Float64).alias("observed_seconds"),
        (pl.col("sm_active_ratio").sum() * INTERVAL).alias("useful_seconds"),
        *[pl.col(c).sum().alias(f"{c}_sum") for c in AGGREGATE_MEANS],
        *[pl.col(c).count().cast(pl.Float64).alias(f"{c}_count") for c in AGGREGATE_MEANS],
        (pl.col("energy_joules").last() - pl.col("energy_joules").first()).alias("energy_joules"),
        pl.col("gpu_temperature_celsius").max().alias("max_temperature_celsius"),
        pl.col("fb_used_bytes").max().alias("max_fb_used_bytes"),
        (((reasons & THROTTLE_SLOWDOWN_MASK) > 0).sum() * INTERVAL)
        .cast(pl.Float64)
        .alias("slowdown_seconds"),
        (((reasons & THROTTLE_THERMAL_MASK) > 0).sum() * INTERVAL)
        .cast(pl.Float64)
        .alias("thermal_seconds"),
        pl.lit(None, dtype=pl.Int64).alias("xid"),
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
    )
    arrow = table.to_arrow()
    return pl.from_arrow(  # type: ignore[return-value]
        pa.Table.from_arrays(
            [arrow.column(f.name).cast(f.type) for f in GPU_AGGREGATE_SCHEMA],
            schema=GPU_AGGREGATE_SCHEMA,
        )
    )


@settings(max_examples=60, deadline=None)
@given(job_samples())
def test_aggregates_give_the_raw_summary(samples: pl.DataFrame) -> None:
    raw = gpu_summary(samples, max_interval_seconds=3 * INTERVAL).sort(["node", "gpu"])
    folded = summary_from_aggregates(_aggregates(samples)).sort(["node", "gpu"])
    assert folded.columns == raw.columns
    for ours, theirs in zip(raw.iter_rows(named=True), folded.iter_rows(named=True), strict=True):
        for name in (
            "observed_seconds",
            "useful_seconds",
            *AGGREGATE_MEANS,
            "energy_joules",
            "max_temperature_celsius",
            "max_fb_used_bytes",
            "slowdown_share",
            "peer_sm_active_ratio",
        ):
            a, b = ours[name], theirs[name]
            assert (a is None) == (b is None), name
            if a is not None:
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (name, a, b)
        assert ours["verdict"] == theirs["verdict"]
        thermal = bool(ours["throttle_reasons"] & THROTTLE_THERMAL_MASK)
        assert bool(theirs["throttle_reasons"] & THERMAL_BIT) == thermal
        assert (ours["first_ts"], ours["last_ts"]) == (theirs["first_ts"], theirs["last_ts"])


def test_several_windows_of_a_gpu_fold_into_one_row() -> None:
    row: dict[str, object] = {f.name: None for f in GPU_AGGREGATE_SCHEMA}
    row |= {"job_id": "7", "node": "gpu01", "gpu": 0, "observed_seconds": 60.0}
    row |= {"useful_seconds": 30.0, "sm_active_ratio_sum": 2.0, "sm_active_ratio_count": 4.0}
    second = row | {"sm_active_ratio_sum": 4.0, "useful_seconds": 60.0}
    table = pa.Table.from_pylist([row, second], schema=GPU_AGGREGATE_SCHEMA)
    folded = summary_from_aggregates(pl.from_arrow(table))  # type: ignore[arg-type]
    assert folded.height == 1
    assert folded["sm_active_ratio"][0] == 0.75
    assert folded["observed_seconds"][0] == 120.0
    assert folded["reported_util_ratio"][0] is None  # never sampled: unknown, not zero
