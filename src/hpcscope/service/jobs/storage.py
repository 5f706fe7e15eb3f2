"""Lustre read and write throughput of running jobs, from the stored job_stats snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.traces.storage_evidence import job_throughput
from hpcscope.store import Store
from hpcscope.store import lustre as lustre_queries

#: Snapshots read around the window: the ones that bracket it count (``bracket``); Lustre
#: moves an entry's snapshot time only when its counters change, so reach back a little.
BRACKET_MARGIN = timedelta(minutes=5)


def job_storage_rates(
    store: Store, job_ids: Sequence[str], *, now: datetime, window: timedelta
) -> dict[str, tuple[float, float]]:
    """``{job_id: (read_bytes_per_second, write_bytes_per_second)}`` over the last ``window``,
    for the jobs among ``job_ids`` with Lustre job_stats in it (none without a Lustre spool)."""
    if not job_ids:
        return {}
    since = now - window
    rows = pl.from_arrow(
        lustre_queries.job_stats(
            store,
            job_ids=list(job_ids),
            since=since - BRACKET_MARGIN,
            operations=("read_bytes", "write_bytes"),
        )
    )
    assert isinstance(rows, pl.DataFrame)
    return job_throughput(rows, since, now)
