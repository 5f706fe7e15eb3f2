"""A job report's GPU rows from per-GPU aggregates (an engine's recording rules) instead of raw
samples. Pure.

:func:`~hpcscope.analysis.jobs.efficiency.gpu_summary` weighs each raw sample by the time to
the next one. An engine's recording rules sum the samples of each window instead, each sample
weighing one scrape interval; while the scrapes are regular the two agree (the equivalence test
holds them within 1 %). The means are ``sum / count`` over the GPU's windows; observed and
useful GPU-seconds, energy, maxima and the Xid come as the rules recorded them. Clock reasons
come as seconds with a slowdown and seconds with a thermal reason (PromQL has no bitwise OR), so
``throttle_reasons`` carries the groups seen: thermal (``0x20``) and another slowdown
(hardware slowdown, ``0x8``), not every bit.
"""

from __future__ import annotations

import polars as pl

from hpcscope.analysis.jobs.efficiency import (
    SERIES_KEYS,
    Thresholds,
    classify_gpus,
    empty_summary,
)
from hpcscope.model.backends import AGGREGATE_MEANS, GpuTime

#: The bits ``throttle_reasons`` is given from the seconds of each group.
THERMAL_BIT = 0x20
OTHER_SLOWDOWN_BIT = 0x8

#: The :data:`~hpcscope.model.backends.GPU_AGGREGATE_SCHEMA` columns the per-GPU verdicts of
#: :func:`summary_from_aggregates` read (:func:`~hpcscope.analysis.jobs.efficiency.classify_gpus`:
#: reported utilisation, SM active, the Xid), with ``observed_seconds``: every GPU the engine
#: scraped has it, so a read of these columns finds the same GPUs as a read of all of them.
VERDICT_COLUMNS: frozenset[str] = frozenset(
    {
        "observed_seconds",
        "reported_util_ratio_sum",
        "reported_util_ratio_count",
        "sm_active_ratio_sum",
        "sm_active_ratio_count",
        "xid",
    }
)
#: The verdicts' columns and the tensor-active mean (the running jobs' GPU rows).
LIVE_GPU_COLUMNS: frozenset[str] = VERDICT_COLUMNS | {
    "tensor_active_ratio_sum",
    "tensor_active_ratio_count",
}
#: The columns :func:`gpu_time_of` reads of :func:`summary_from_aggregates`' rows.
GPU_TIME_COLUMNS: frozenset[str] = frozenset(
    {
        "observed_seconds",
        "useful_seconds",
        "reported_util_ratio_sum",
        "reported_util_ratio_count",
        "sm_active_ratio_sum",
        "sm_active_ratio_count",
        "first_ts",
        "last_ts",
    }
)


def summary_from_aggregates(
    aggregates: pl.DataFrame, *, thresholds: Thresholds = Thresholds()
) -> pl.DataFrame:
    """``gpu_summary`` rows (verdicts included) from :data:`GPU_AGGREGATE_SCHEMA` rows.

    Args:
        aggregates: one or more rows per (``job_id``, ``node``, ``gpu``, ``gpu_instance_id``)
            (:data:`hpcscope.model.backends.GPU_AGGREGATE_SCHEMA`); several rows of a GPU are
            folded (sums added, maxima kept).
        thresholds: the verdicts' thresholds.

    Returns:
        The columns of :func:`~hpcscope.analysis.jobs.efficiency.gpu_summary`.
    """
    if aggregates.height == 0:
        return empty_summary()
    folded = aggregates.group_by(SERIES_KEYS).agg(
        pl.col("observed_seconds").sum(),
        pl.col("useful_seconds").sum(),
        *[pl.col(f"{c}_{part}").sum() for c in AGGREGATE_MEANS for part in ("sum", "count")],
        pl.col("energy_joules").sum(),
        pl.col("energy_joules").is_not_null().any().alias("_has_energy"),
        pl.col("max_temperature_celsius").max(),
        pl.col("max_fb_used_bytes").max(),
        pl.col("slowdown_seconds").sum(),
        pl.col("thermal_seconds").sum(),
        pl.col("xid").drop_nulls().last(),
        pl.col("first_ts").min(),
        pl.col("last_ts").max(),
    )
    observed = pl.col("observed_seconds")
    thermal = pl.col("thermal_seconds").fill_null(0.0)
    slowdown = pl.col("slowdown_seconds").fill_null(0.0)
    summary = folded.select(
        *SERIES_KEYS,
        observed.cast(pl.Float64),
        *[
            pl.when(pl.col(f"{c}_count") > 0)
            .then(pl.col(f"{c}_sum") / pl.col(f"{c}_count"))
            .otherwise(None)
            .cast(pl.Float64)
            .alias(c)
            for c in AGGREGATE_MEANS
        ],
        pl.col("useful_seconds").cast(pl.Float64),
        pl.when(pl.col("_has_energy"))
        .then(pl.col("energy_joules"))
        .otherwise(None)
        .cast(pl.Float64)
        .alias("energy_joules"),
        pl.col("max_temperature_celsius").cast(pl.Float64),
        (
            pl.when(thermal > 0).then(pl.lit(THERMAL_BIT)).otherwise(pl.lit(0))
            | pl.when(slowdown > thermal).then(pl.lit(OTHER_SLOWDOWN_BIT)).otherwise(pl.lit(0))
        )
        .cast(pl.Int64)
        .alias("throttle_reasons"),
        pl.when(observed > 0)
        .then((slowdown / observed).clip(0.0, 1.0))
        .otherwise(None)
        .cast(pl.Float64)
        .alias("slowdown_share"),
        pl.col("xid").cast(pl.Int64),
        pl.col("max_fb_used_bytes").cast(pl.Float64),
        pl.col("first_ts"),
        pl.col("last_ts"),
    )
    return classify_gpus(summary, thresholds=thresholds)


def gpu_time_of(summary: pl.DataFrame) -> GpuTime:
    """The diagram's GPU time of ``gpu_summary`` rows: allocated (observed) GPU-seconds, the
    part with a real-efficiency figure (measured), useful and reported-busy GPU-seconds."""
    if summary.height == 0:
        return GpuTime(0.0, 0.0, 0.0, 0.0, None, None, 0)
    observed = pl.col("observed_seconds").fill_null(0.0)
    totals = summary.select(
        observed.sum().alias("allocated"),
        pl.when(pl.col("sm_active_ratio").is_not_null())
        .then(observed)
        .otherwise(0.0)
        .sum()
        .alias("measured"),
        pl.col("useful_seconds").fill_null(0.0).sum().alias("useful"),
        (observed * pl.col("reported_util_ratio").fill_null(0.0)).sum().alias("busy"),
        pl.col("first_ts").min().alias("first"),
        pl.col("last_ts").max().alias("last"),
        pl.col("job_id").drop_nulls().n_unique().alias("jobs"),
    ).row(0, named=True)
    return GpuTime(
        allocated_seconds=float(totals["allocated"]),
        measured_seconds=float(totals["measured"]),
        useful_seconds=float(totals["useful"]),
        reported_busy_seconds=float(totals["busy"]),
        first_ts=totals["first"],
        last_ts=totals["last"],
        jobs=int(totals["jobs"]),
    )
