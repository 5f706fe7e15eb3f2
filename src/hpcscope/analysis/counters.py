"""Cumulative counters: their increase across resets, and the reads around a window.

One rule for every cumulative source (GPU energy, InfiniBand port counters, Lustre job_stats):

* **increase with resets** (:func:`counter_increase`): between two reads the increase is
  ``value - previous``; a counter that went down was reset (a reboot, a driver reload,
  ``perfquery -R``, an entry Lustre dropped), and the increase is then the new value
  (Prometheus' ``rate`` convention: it restarted from 0). A source may know of a restart that
  no decrease shows (a new Lustre ``start_ts``): it passes ``restarted``.
* **reads around a window** (:func:`bracket_reads`): counters are read every scrape or poll
  interval (seconds to a minute apart), while a profiled window lasts seconds: the increase over
  the window is the increase between the reads that bracket it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import polars as pl


def counter_increase(
    value: pl.Expr, previous: pl.Expr, *, restarted: pl.Expr | None = None
) -> pl.Expr:
    """The increase of a cumulative counter from the read ``previous`` to the read ``value``.

    Args:
        value: the counter at a read.
        previous: the same counter at the read before (e.g. ``value.shift(1).over(keys)``).
        restarted: optional boolean: the source knows the counter restarted from 0 here.

    Returns:
        ``value - previous``, or ``value`` when the counter went down or ``restarted`` holds;
        null when ``previous`` or ``value`` is null and no restart is known.
    """
    reset = (value < previous).fill_null(False)
    if restarted is not None:
        reset = reset | restarted.fill_null(False)
    return pl.when(reset).then(value).otherwise(value - previous)


def bracket_reads(
    rows: pl.DataFrame, start: datetime, end: datetime, *, by: Sequence[str]
) -> pl.DataFrame:
    """For each series (rows with the same ``by`` columns), its reads from the last one at or
    before ``start`` to the first one at or after ``end`` (its first/last read when there is
    none); ``ts`` is the read time."""
    if rows.height == 0:
        return rows
    keys = list(by)
    ts = pl.col("ts")
    lower = ts.filter(ts <= start).max().over(keys).fill_null(ts.min().over(keys))
    upper = ts.filter(ts >= end).min().over(keys).fill_null(ts.max().over(keys))
    return rows.filter((ts >= lower) & (ts <= upper))
