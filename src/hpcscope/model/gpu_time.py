"""The charged GPU-seconds of a job: allocated, else observed; useful capped at allocated.

A kept job summary holds three GPU-second figures: ``allocated_gpu_seconds`` (GPUs x elapsed,
what Slurm reserved; null when the allocation is not known), ``observed_gpu_seconds`` (the
sample weights of the job's GPUs) and ``useful_gpu_seconds`` (sample weight x SM active).
Chargeback, the GPU-efficiency SLO and ``/metrics`` charge a job:

- **allocated** = the allocation when it is known (not null, not NaN), else the observed
  seconds, else 0; never negative;
- **useful** = the useful seconds (0 when null or NaN), never negative, at most allocated.

:func:`charged_gpu_seconds` is the rule; :func:`charged_gpu_seconds_sql` the same in SQL for the
store's aggregates and ``hpcscope.analysis.gpu_time.charged_gpu_seconds_exprs`` in Polars for
frames; Hypothesis tests hold both equal to it on random values (NaN, nulls, negatives,
no allocation: ``tests/model/test_gpu_time.py``).
"""

from __future__ import annotations

import math


def _known(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def charged_gpu_seconds(
    allocated: float | None, observed: float | None, useful: float | None
) -> tuple[float, float]:
    """``(allocated, useful)`` GPU-seconds charged for one job (module docstring).

    Args:
        allocated: the summary's ``allocated_gpu_seconds`` (None or NaN: not known).
        observed: its ``observed_gpu_seconds`` (the fallback).
        useful: its ``useful_gpu_seconds``.
    """
    charged = _known(allocated)
    if charged is None:
        charged = _known(observed)
    charged = max(0.0, charged if charged is not None else 0.0)
    used = _known(useful)
    return charged, min(max(0.0, used if used is not None else 0.0), charged)


def charged_gpu_seconds_sql(allocated: str, observed: str, useful: str) -> tuple[str, str]:
    """:func:`charged_gpu_seconds` as two SQL expressions (DuckDB), ``(allocated, useful)``.

    Args:
        allocated / observed / useful: SQL column expressions of the three figures.
    """

    def known(column: str) -> str:
        return f"(CASE WHEN isnan({column}) THEN NULL ELSE {column} END)"

    charged = f"greatest(0.0, coalesce({known(allocated)}, {known(observed)}, 0.0))"
    used = f"least(greatest(0.0, coalesce({known(useful)}, 0.0)), {charged})"
    return charged, used
