"""A job's per-GPU time series: raw samples for zoom-in, 1-minute rollups for anything wider.

The bucket is chosen so that the chart gets at most ``max_points`` points over the job's life.
Buckets of 60 s or more (or any bucket once raw samples were dropped by retention) read the
rollups, rounded up to whole minutes; shorter buckets read raw samples. Whatever part of the
job's life neither raw samples nor rollups cover any more is listed in ``out_of_retention``, so
that a chart says so instead of drawing a zero.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pyarrow as pa

from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.jobs.contracts import JobTimeseries
from hpcscope.store import reports as queries
from hpcscope.store import rollups
from hpcscope.store import summaries as kept
from hpcscope.store.duck import Store

_KEYS = ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio")


def _span(*ranges: tuple[datetime | None, datetime | None]) -> tuple[datetime | None, ...]:
    firsts = [a for a, _ in ranges if a is not None]
    lasts = [b for _, b in ranges if b is not None]
    return (min(firsts) if firsts else None, max(lasts) if lasts else None)


def job_timeseries(
    store: Store, job_id: str, *, scrape_interval_seconds: float, max_points: int = 720
) -> JobTimeseries:
    """The time series of a job the caller may see (visibility is checked by the caller).

    Returns:
        ``job_id``, ``bucket_seconds``, ``source`` (``raw``, ``rollup`` or None when nothing is
        left), ``series`` (per GPU: ``node``, ``gpu``, ``t`` in epoch seconds and the means of
        ``reported_util_ratio``, ``sm_active_ratio``, ``tensor_active_ratio``) and
        ``out_of_retention``: ``[{"start", "end"}]`` in epoch seconds, the parts of the job's
        life whose data was dropped.
    """
    raw = queries.sample_time_range(store, job_id)
    rolled = rollups.rollup_time_range(store, job_id)
    life = _span(raw, rolled, kept.summary_time_range(store, job_id))
    first, last = life
    if first is None or last is None:
        return JobTimeseries.model_validate(
            {
                "job_id": job_id,
                "bucket_seconds": None,
                "source": None,
                "series": [],
                "out_of_retention": [],
            }
        )
    span = max(1.0, (last - first).total_seconds())
    bucket = max(int(scrape_interval_seconds), int(span / max_points) + 1)
    raw_covers = raw[0] is not None and (rolled[0] is None or raw[0] <= rolled[0])
    rows: pa.Table
    if rolled[0] is not None and (bucket >= 60 or not raw_covers):
        bucket = 60 * math.ceil(bucket / 60)
        rows, source, covered = (
            rollups.rollup_timeseries(store, job_id, bucket_seconds=bucket),
            "rollup",
            rolled,
        )
    elif raw[0] is not None:
        rows = queries.gpu_timeseries(store, job_id, bucket_seconds=bucket)
        source, covered = "raw", raw
    else:
        return JobTimeseries.model_validate(
            {
                "job_id": job_id,
                "bucket_seconds": None,
                "source": None,
                "series": [],
                "out_of_retention": [{"start": epoch_seconds(first), "end": epoch_seconds(last)}],
            }
        )
    gaps = []
    if covered[0] is not None and covered[0] > first:
        gaps.append({"start": epoch_seconds(first), "end": epoch_seconds(covered[0])})
    if covered[1] is not None and covered[1] < last:
        gaps.append({"start": epoch_seconds(covered[1]), "end": epoch_seconds(last)})
    series: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for row in rows.to_pylist():
        entry = series.setdefault(
            (row["node"], int(row["gpu"])), {"t": [], **{key: [] for key in _KEYS}}
        )
        entry["t"].append(epoch_seconds(row["bucket"]))
        for key in _KEYS:
            entry[key].append(row[key])
    return JobTimeseries.model_validate(
        {
            "job_id": job_id,
            "bucket_seconds": bucket,
            "source": source,
            "series": [
                {"node": node, "gpu": gpu, **values}
                for (node, gpu), values in sorted(series.items())
            ],
            "out_of_retention": gaps,
        }
    )
