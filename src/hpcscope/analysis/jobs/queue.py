"""Queue waits from scheduler records: the two definitions an SLO report needs.

* ``queue_wait_seconds`` = ``max(start - submit, 0)``: XDMoD's "wait hours" (what a user felt);
* ``eligible_wait_seconds`` = ``max(start - eligible, 0)``: the wait the scheduler is answerable
  for, excluding holds, dependencies and ``--begin`` times (``telemetry.md`` §4).

Jobs that have not started have null waits (a pending job's wait is not known yet).
"""

from __future__ import annotations

import polars as pl


def queue_waits(jobs: pl.DataFrame) -> pl.DataFrame:
    """Add both queue waits to scheduler records.

    Args:
        jobs: columns ``job_id``, ``submit_time``, ``eligible_time``, ``start_time``
            (datetimes, nulls allowed), as in the ``jobs`` table.

    Returns:
        ``jobs`` with ``queue_wait_seconds`` and ``eligible_wait_seconds`` (float64, >= 0).
    """

    def wait(since: str) -> pl.Expr:
        seconds = (pl.col("start_time") - pl.col(since)).dt.total_microseconds() / 1e6
        return pl.when(seconds < 0).then(0.0).otherwise(seconds).cast(pl.Float64)

    return jobs.with_columns(
        wait("submit_time").alias("queue_wait_seconds"),
        wait("eligible_time").alias("eligible_wait_seconds"),
    )
