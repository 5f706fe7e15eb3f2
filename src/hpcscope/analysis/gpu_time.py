"""The charged GPU-seconds rule of :mod:`hpcscope.model.gpu_time` as Polars expressions.

For frames of many jobs (chargeback's :func:`~hpcscope.analysis.chargeback.frames.job_charges`,
the GPU-efficiency SLO's events); ``tests/model/test_gpu_time.py`` holds them equal to
:func:`hpcscope.model.gpu_time.charged_gpu_seconds` on random values.
"""

from __future__ import annotations

import polars as pl


def charged_gpu_seconds_exprs(
    allocated: str = "allocated_gpu_seconds",
    observed: str = "observed_gpu_seconds",
    useful: str = "useful_gpu_seconds",
) -> tuple[pl.Expr, pl.Expr]:
    """``(allocated, useful)`` charged GPU-seconds as expressions over the named columns
    (float64; nulls and NaN are not known)."""

    def known(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.Float64).fill_nan(None)

    charged = pl.coalesce(known(allocated), known(observed), pl.lit(0.0)).clip(lower_bound=0.0)
    used = pl.min_horizontal(pl.coalesce(known(useful), pl.lit(0.0)).clip(lower_bound=0.0), charged)
    return charged, used
