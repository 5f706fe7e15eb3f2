"""A job's per-GPU time series: raw samples for zoom-in, 1-minute rollups for anything wider.

The bucket is chosen so that the chart gets at most ``max_points`` points over the job's life.
Buckets of 60 s or more (or any bucket once raw samples were dropped by retention) read the
rollups, rounded up to whole minutes; shorter buckets read raw samples. Whatever part of the
job's life neither raw samples nor rollups cover any more is listed in ``out_of_retention``, so
that a chart says so instead of drawing a zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.backends import GpuMetrics, ReadSource
from hpcscope.model.timeutil import epoch_seconds, utcnow
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
    store: Store,
    job_id: str,
    *,
    scrape_interval_seconds: float,
    max_points: int = 720,
    metrics: GpuMetrics | None = None,
    now: datetime | None = None,
) -> JobTimeseries:
    """The time series of a job the caller may see (visibility is checked by the caller).

    Returns:
        ``job_id``, ``bucket_seconds``, ``source`` (``raw``, ``rollup`` or None when nothing is
        left), ``series`` (per GPU: ``node``, ``gpu``, ``t`` in epoch seconds and the means of
        ``reported_util_ratio``, ``sm_active_ratio``, ``tensor_active_ratio``),
        ``out_of_retention``: ``[{"start", "end"}]`` in epoch seconds, the parts of the job's
        life whose data was dropped (or that the engine no longer keeps), and ``metrics``: how
        the metrics backend answered.
    """
    reader = metrics if metrics is not None else queries.EmbeddedSamples(store)
    if reader.backend != "embedded":
        return _engine_timeseries(
            store, job_id, reader, scrape_interval_seconds, max_points, now or utcnow()
        )
    return embedded_timeseries(store, job_id, reader, scrape_interval_seconds, max_points).document


@dataclass(frozen=True, slots=True)
class EmbeddedTimeseries:
    """A job's time series from the store, and the earliest raw sample and rollup minute of
    the job it read (what retention may drop under it; None: none)."""

    document: JobTimeseries
    raw_first: datetime | None
    rollup_first: datetime | None
    summarised: bool = False
    """The job had a kept summary: its samples are final, so is its chart (it may be stored)."""


@dataclass(frozen=True, slots=True)
class _Ranges:
    """What a job's chart reads before its samples: the window its samples are read in
    (:func:`_reach`), and the first and last time of its raw samples, rollups and summary."""

    reach: tuple[datetime | None, datetime | None]
    raw: tuple[datetime | None, datetime | None]
    rolled: tuple[datetime | None, datetime | None]
    summary: tuple[datetime | None, datetime | None]


def embedded_timeseries(
    store: Store,
    job_id: str,
    reader: GpuMetrics,
    scrape_interval_seconds: float,
    max_points: int = 720,
) -> EmbeddedTimeseries:
    """:func:`job_timeseries` from the store's own samples and rollups (``reader``: the
    embedded backend)."""
    since, until = _reach(store, job_id)
    ranges = _Ranges(
        (since, until),
        queries.sample_time_range(store, job_id, cold_since=since, cold_until=until),
        rollups.rollup_time_range(store, job_id),
        kept.summary_time_range(store, job_id),
    )
    return _embedded(job_id, ranges, reader, scrape_interval_seconds, max_points)


def embedded_timeseries_of(
    store: Store,
    job_ids: Sequence[str],
    reader: GpuMetrics,
    scrape_interval_seconds: float,
    max_points: int = 720,
) -> dict[str, EmbeddedTimeseries]:
    """:func:`embedded_timeseries` of each of ``job_ids`` (the same documents: tested), with
    the reads before the samples made once for all of them: four queries and one scan of the
    cold tier's days instead of those per job (a keeper's batch). The samples are still read
    per job, by the same query as one job's: their means are summed in the same order."""
    reach = _reaches(store, job_ids)
    raw = queries.sample_time_ranges(store, reach)
    rolled = rollups.rollup_time_ranges(store, job_ids)
    summary = kept.summary_time_ranges(store, job_ids)
    return {
        job_id: _embedded(
            job_id,
            _Ranges(reach[job_id], raw[job_id], rolled[job_id], summary[job_id]),
            reader,
            scrape_interval_seconds,
            max_points,
        )
        for job_id in job_ids
    }


def _embedded(
    job_id: str,
    ranges: _Ranges,
    reader: GpuMetrics,
    scrape_interval_seconds: float,
    max_points: int,
) -> EmbeddedTimeseries:
    (since, until), raw, rolled = ranges.reach, ranges.raw, ranges.rolled
    summarised = ranges.summary != (None, None)

    def read(document: JobTimeseries) -> EmbeddedTimeseries:
        return EmbeddedTimeseries(document, raw[0], rolled[0], summarised)

    life = _span(raw, rolled, ranges.summary)
    first, last = life
    if first is None or last is None:
        return read(_document(job_id, None, None, {}, [], None))
    span = max(1.0, (last - first).total_seconds())
    bucket = max(int(scrape_interval_seconds), int(span / max_points) + 1)
    raw_covers = raw[0] is not None and (rolled[0] is None or raw[0] <= rolled[0])
    if rolled[0] is not None and (bucket >= 60 or not raw_covers):
        bucket = 60 * math.ceil(bucket / 60)
        source, covered = "rollup", rolled
    elif raw[0] is not None:
        bucket = bucket if bucket < 60 or rolled[0] is None else 60 * math.ceil(bucket / 60)
        source, covered = "raw", raw
    else:
        gone = [{"start": epoch_seconds(first), "end": epoch_seconds(last)}]
        return read(_document(job_id, None, None, {}, gone, None))
    answer = reader.gpu_timeseries([job_id], bucket_seconds=bucket, since=since, until=until)
    gaps = _gaps((first, last), covered)
    return read(_document(job_id, bucket, source, _series(answer.table), gaps, answer.source))


#: How far around a job's scheduled life its samples are read: whole days, so that the cold
#: tier's daily parts of the rest of the month are not scanned (clocks and attribution margins
#: are minutes).
REACH_MARGIN = timedelta(days=1)


def _reach(store: Store, job_id: str) -> tuple[datetime | None, datetime | None]:
    """The window a job's samples are read in: its scheduled life and :data:`REACH_MARGIN`
    (unbounded on a side the scheduler does not know: no record, not started, running)."""
    return _reaches(store, [job_id])[job_id]


def _reaches(
    store: Store, job_ids: Sequence[str]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """:func:`_reach` of each of ``job_ids``, in one query."""
    reach: dict[str, tuple[datetime | None, datetime | None]]
    reach = dict.fromkeys(job_ids, (None, None))
    for record in queries.jobs_by_id(store, job_ids, JobScope(all_jobs=True)).to_pylist():
        start, end = record["start_time"], record["end_time"]
        reach[str(record["job_id"])] = (
            start - REACH_MARGIN if start is not None else None,
            end + REACH_MARGIN if end is not None else None,
        )
    return reach


def _gaps(
    life: tuple[datetime, datetime], covered: tuple[datetime | None, datetime | None]
) -> list[dict[str, float]]:
    first, last = life
    gaps = []
    if covered[0] is not None and covered[0] > first:
        gaps.append({"start": epoch_seconds(first), "end": epoch_seconds(covered[0])})
    if covered[1] is not None and covered[1] < last:
        gaps.append({"start": epoch_seconds(covered[1]), "end": epoch_seconds(last)})
    return gaps


def _series(rows: pa.Table) -> dict[tuple[str, int], dict[str, list[Any]]]:
    series: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for row in rows.to_pylist():
        entry = series.setdefault(
            (row["node"], int(row["gpu"])), {"t": [], **{key: [] for key in _KEYS}}
        )
        entry["t"].append(epoch_seconds(row["bucket"]))
        for key in _KEYS:
            entry[key].append(row[key])
    return series


def _document(
    job_id: str,
    bucket: int | None,
    source: str | None,
    series: dict[tuple[str, int], dict[str, list[Any]]],
    gaps: list[dict[str, float]],
    read: ReadSource | None,
) -> JobTimeseries:
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
            "metrics": None if read is None else read.to_dict(),
        }
    )


def _engine_timeseries(
    store: Store,
    job_id: str,
    reader: GpuMetrics,
    scrape_interval_seconds: float,
    max_points: int,
    now: datetime,
) -> JobTimeseries:
    """A job's chart from an engine: over the job's life as the scheduler (or its kept
    summary) knows it, in buckets of whole rule windows past one minute; the part of the life
    before the engine's first bucket is out of its retention."""
    record = queries.jobs_by_id(store, [job_id], JobScope(all_jobs=True)).to_pylist()
    start = record[0]["start_time"] if record else None
    end = record[0]["end_time"] if record else None
    kept_range = kept.summary_time_range(store, job_id)
    first = start or kept_range[0]
    if first is None:
        return _document(job_id, None, None, {}, [], None)
    last = min(now, end) if end is not None else now
    span = max(1.0, (last - first).total_seconds())
    bucket = max(int(scrape_interval_seconds), int(span / max_points) + 1)
    if bucket >= 60:
        bucket = 60 * math.ceil(bucket / 60)
    read = reader.gpu_timeseries([job_id], bucket_seconds=bucket, since=first, until=last)
    times = read.table.column("bucket").to_pylist() if read.table.num_rows else []
    covered = (min(times), max(times) + timedelta(seconds=bucket)) if times else (None, None)
    if not times:
        gone = [{"start": epoch_seconds(first), "end": epoch_seconds(last)}]
        return _document(job_id, bucket, None, {}, gone, read.source)
    source = "rollup" if read.source.read == "recording_rules" else "raw"
    gaps = _gaps((first, last), (covered[0], None))
    return _document(job_id, bucket, source, _series(read.table), gaps, read.source)
