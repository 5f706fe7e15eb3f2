"""The waste attribution of :func:`~hpcscope.analysis.chargeback.waste.attribute_waste`, for
many jobs at once over columnar GPU rows (Polars): the same rule, without a Python object per
GPU. A read of a month at a large site has hundreds of thousands of GPU rows; this is what the
service runs. ``tests/analysis/chargeback/test_frames.py`` checks it against the per-job
reference on arbitrary rows (Hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from hpcscope.analysis.chargeback.waste import (
    FAILED_EXIT_CAUSES,
    IDLE_VERDICT,
    VERDICT_CAUSES,
    JobCharge,
    WasteCause,
)
from hpcscope.analysis.gpu_time import charged_gpu_seconds_exprs

_CAUSES = [c.value for c in WasteCause]


def job_charges(jobs: pl.DataFrame, gpus: pl.DataFrame) -> dict[str, JobCharge]:
    """Job id -> its charge.

    Args:
        jobs: one row per job: ``job_id``, ``gpus_allocated``, ``allocated_gpu_seconds``,
            ``observed_gpu_seconds``, ``useful_gpu_seconds``, ``exit_cause``.
        gpus: the jobs' GPU rows: ``job_id``, ``observed_seconds``, ``useful_seconds``,
            ``verdict``.
    """
    if jobs.height == 0:
        return {}
    allocated, useful = charged_gpu_seconds_exprs()
    per_job_gpus = gpus.group_by("job_id").agg(
        pl.len().alias("_rows"), (pl.col("verdict") == IDLE_VERDICT).all().alias("_all_idle")
    )
    frame = (
        jobs.with_columns(allocated.alias("_a"), useful.alias("_u"))
        .join(per_job_gpus, on="job_id", how="left")
        .with_columns(pl.col("_rows").fill_null(0), pl.col("_all_idle").fill_null(False))
        .with_columns(
            pl.when(pl.col("gpus_allocated").fill_null(0) != 0)
            .then(pl.col("gpus_allocated"))
            .otherwise(pl.col("_rows"))
            .alias("_count")
        )
        .with_columns(
            pl.when(pl.col("_count") > 0)
            .then(pl.col("_a") / pl.col("_count"))
            .otherwise(0.0)
            .alias("_share"),
            pl.col("exit_cause").is_in(list(FAILED_EXIT_CAUSES)).alias("_failed"),
        )
    )
    verdict_cause = pl.col("verdict").replace_strict(
        {v: c.value for v, c in VERDICT_CAUSES.items()}, default=WasteCause.UNMEASURED.value
    )
    per_gpu = (
        gpus.join(frame.select("job_id", "_share", "_all_idle"), on="job_id")
        .with_columns(
            pl.col("observed_seconds").clip(lower_bound=0.0).alias("_o"),
            pl.col("useful_seconds").clip(lower_bound=0.0).alias("_g_u"),
        )
        .with_columns(pl.min_horizontal("_o", "_share").alias("_o"))
        .with_columns(
            pl.when(pl.col("verdict") == IDLE_VERDICT)
            .then(
                pl.when(pl.col("_all_idle"))
                .then(pl.lit(WasteCause.IDLE_ALLOCATION.value))
                .otherwise(pl.lit(WasteCause.OVER_REQUESTED.value))
            )
            .otherwise(verdict_cause)
            .alias("_cause"),
            pl.when(pl.col("_o") > pl.col("_g_u"))
            .then(pl.col("_o") - pl.col("_g_u"))
            .otherwise(0.0)
            .alias("_measured"),
            (pl.col("_share") - pl.col("_o")).alias("_unmeasured"),
        )
    )
    measured = per_gpu.group_by("job_id").agg(
        *[pl.col("_measured").filter(pl.col("_cause") == c).sum().alias(c) for c in _CAUSES],
        pl.col("_unmeasured").sum().alias("_gpu_unmeasured"),
    )
    parts = frame.join(measured, on="job_id", how="left").with_columns(
        [pl.col(c).fill_null(0.0) for c in _CAUSES] + [pl.col("_gpu_unmeasured").fill_null(0.0)]
    )
    unmeasured = WasteCause.UNMEASURED.value
    failed = WasteCause.FAILED_JOB.value
    missing = (pl.col("_count") - pl.col("_rows")).clip(lower_bound=0) * pl.col("_share")
    parts = parts.with_columns(
        pl.col(unmeasured) + pl.col("_gpu_unmeasured") + missing
    ).with_columns(
        # a failed job: all of W is failed_job; no GPU count: all of it unmeasured
        *[
            pl.when(pl.col("_failed"))
            .then(pl.lit(1.0 if c == failed else 0.0))
            .when(pl.col("_count") <= 0)
            .then(pl.lit(1.0 if c == unmeasured else 0.0))
            .otherwise(pl.col(c))
            .alias(c)
            for c in _CAUSES
        ]
    )
    return _scaled(parts)


def _scaled(parts: pl.DataFrame) -> dict[str, JobCharge]:
    """Scale each job's parts to its waste (the reference's last steps, row by row)."""
    result: dict[str, JobCharge] = {}
    columns: Sequence[str] = ["job_id", "_a", "_u", *_CAUSES]
    causes = list(WasteCause)
    for row in parts.select(columns).iter_rows():
        job_id, a, u, *values = row
        waste = a - u
        shares = dict.fromkeys(causes, 0.0)
        total = sum(values)
        if waste > 0.0:
            if total <= 0.0:
                shares[WasteCause.UNMEASURED] = waste
            else:
                scale = waste / total
                for cause, value in zip(causes, values, strict=True):
                    shares[cause] = value * scale
                largest = max(shares, key=shares.__getitem__)
                shares[largest] = max(0.0, shares[largest] + waste - sum(shares.values()))
        result[job_id] = JobCharge(a, u, shares)
    return result
