"""Rules over scraped GPU samples that every layer shares (one definition each).

**The sample-weight cap.** A sample stands for the time until the next sample of its series
(job, node, GPU, MIG instance), at most :data:`GAP_SCRAPE_INTERVALS` scrape intervals
(:func:`max_sample_weight_seconds`). A longer silence is a collection *gap*: the sample before
it weighs the cap (it is clipped, not dropped), and the rest of the silence is neither useful
nor idle time. A series' last sample weighs the median interval of its series (the cap when it
has only one sample). :func:`sample_weights` is the rule over one series;
:func:`hpcscope.analysis.jobs.efficiency.with_time_weights` applies it over frames and the
store's GPU-time query (``store/diagram.py``) in SQL, and property tests hold both equal to it
(``tests/model/test_sample_weights.py``, ``tests/model/test_sampling.py``). The same cap says
when a collector target is stale and bounds the live window.

**"This GPU has no job".** dcgm-exporter's ``hpc_job`` label and the prolog's mapping files
write an empty value or ``0`` for a GPU that no job holds (:data:`NO_JOB_LABELS`). Ingest turns
them into a null ``job_id`` (:func:`job_id_from_label`); the store's queries still refuse them
(:func:`has_job_sql`) so that rows written by another tool are read the same way.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

#: Longest interval one sample stands for, in scrape intervals; a longer silence is a gap.
GAP_SCRAPE_INTERVALS = 3

#: Job labels that mean "no job holds this GPU" (dcgm-exporter, Slurm mapping files).
NO_JOB_LABELS: frozenset[str] = frozenset({"", "0"})


def max_sample_weight_seconds(scrape_interval_seconds: float) -> float:
    """The cap on one sample's weight: :data:`GAP_SCRAPE_INTERVALS` x the scrape interval.

    Args:
        scrape_interval_seconds: the configured scrape interval (> 0).

    Raises:
        ValueError: the interval is not positive.
    """
    if not scrape_interval_seconds > 0:
        raise ValueError(f"scrape interval must be positive, got {scrape_interval_seconds!r}")
    return GAP_SCRAPE_INTERVALS * float(scrape_interval_seconds)


def sample_weights(times_seconds: Sequence[float], *, max_interval_seconds: float) -> list[float]:
    """How long each sample of one series stands for, in seconds (module docstring).

    Args:
        times_seconds: the series' sample times in seconds, in time order (equal times allowed).
        max_interval_seconds: the cap (:func:`max_sample_weight_seconds`).

    Returns:
        One weight per sample, each in ``[0, max_interval_seconds]``: the time to the next
        sample, clipped; the last sample's is the median of the series' intervals (the cap
        when the series has one sample), clipped.

    Raises:
        ValueError: the times are not in order.
    """
    if not times_seconds:
        return []
    intervals = [b - a for a, b in itertools.pairwise(times_seconds)]
    if any(gap < 0 for gap in intervals):
        raise ValueError("sample times must be in time order")
    last = statistics.median(intervals) if intervals else max_interval_seconds
    return [min(max(0.0, gap), max_interval_seconds) for gap in [*intervals, last]]


def job_id_from_label(label: str | None) -> str | None:
    """The job id a label names, or None when it names no job (absent, empty or ``0``).

    The label is taken as it is, exactly as dcgm-exporter compares it (no trimming).
    """
    return None if label is None or label in NO_JOB_LABELS else label


def has_job_sql(column: str) -> str:
    """A SQL condition, never NULL, true when ``column`` names a job (see :data:`NO_JOB_LABELS`).

    Args:
        column: a SQL column expression, e.g. ``s.job_id``.
    """
    labels = ", ".join(f"'{label}'" for label in sorted(NO_JOB_LABELS))
    return f"coalesce({column} NOT IN ({labels}), FALSE)"
