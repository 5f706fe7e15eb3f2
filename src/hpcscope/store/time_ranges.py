"""First and last sample time of many jobs in one query: the keeper's batches read them from
the raw samples, the rollups and the summaries alike."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # duck imports the modules that import this one
    from hpcscope.store.duck import Store

#: A job's first and last sample time; (None, None) for a job without any.
TimeRange = tuple[datetime | None, datetime | None]


def job_time_ranges(
    store: Store, select: str, job_ids: Iterable[str], *, grouped: bool
) -> dict[str, TimeRange]:
    """``select`` (``SELECT job_id, <first> AS first, <last> AS last FROM <table>``) of each of
    ``job_ids``, in one query; ``grouped``: the select aggregates (``GROUP BY job_id``)."""
    ids = list(job_ids)
    ranges: dict[str, TimeRange] = dict.fromkeys(ids, (None, None))
    if not ids:
        return ranges
    marks = ", ".join("?" for _ in ids)
    group = " GROUP BY job_id" if grouped else ""
    for row in store.query(f"{select} WHERE job_id IN ({marks}){group}", ids).to_pylist():
        ranges[str(row["job_id"])] = (row["first"], row["last"])
    return ranges
