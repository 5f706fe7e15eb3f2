"""Reads of cumulative counters around a window.

InfiniBand port counters and Lustre job_stats are both cumulative and read every scrape or poll
interval (seconds to a minute apart), while a profiled window lasts seconds: the increase over
the window is the increase between the reads that bracket it. One rule for every such source.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import polars as pl


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
