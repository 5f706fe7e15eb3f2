"""GPU samples read from a site's Prometheus (or VictoriaMetrics, Thanos, Mimir) HTTP API.

One ``POST /api/v1/query_range`` per chunk of the window (through the engine's
:class:`~hpcscope.service.backends.client.EngineClient`: authentication, retries, limits),
with the selector of every dcgm-exporter series of the jobs (``hpc_job``), at a step of the
scrape interval: the answer is turned into the same Arrow table the embedded store returns
(:func:`hpcscope.ingest.promql.dcgm_series_to_samples`), so the job report is computed by the
same code on either backend. A window longer than :data:`MAX_POINTS_PER_QUERY` steps is read
in chunks (Prometheus refuses more than 11,000 points per series in one query).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import httpx2
import pyarrow as pa

from hpcscope.ingest.promql import dcgm_series_selector, dcgm_series_to_samples
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import as_naive_utc, epoch_seconds, utcnow
from hpcscope.service.backends.client import EngineClient, EngineConfig

#: Steps per query_range call (under Prometheus' 11,000 points per series).
MAX_POINTS_PER_QUERY = 10_000


def read_grid(start: datetime, end: datetime, step_seconds: float) -> list[tuple[int, int, int]]:
    """The query_range calls that read ``[start, end]``: (start, end, step), epoch milliseconds.

    The step is the largest whole number of milliseconds, at most ``step_seconds``, that puts
    points on both ends of the window (within a millisecond a point): a job report weighs each
    point by the time to the next, so a window read at a step that does not divide it would lose
    up to a step at its end (1.1 % of a minute's GPU-hours at 1 s scrapes, measured). Chunks
    hold at most :data:`MAX_POINTS_PER_QUERY` steps.
    """
    start_ms = round(epoch_seconds(start) * 1000)
    end_ms = round(epoch_seconds(end) * 1000)
    span_ms = end_ms - start_ms
    if span_ms < 0:
        return []
    wanted_ms = max(1, round(step_seconds * 1000))
    if span_ms == 0:
        return [(start_ms, end_ms, wanted_ms)]
    steps = max(1, math.ceil(span_ms / wanted_ms))
    step_ms = max(1, span_ms // steps)
    grid = []
    done = 0
    while done <= steps:
        points = min(MAX_POINTS_PER_QUERY, steps - done)
        chunk_start = start_ms + done * step_ms
        grid.append((chunk_start, chunk_start + points * step_ms, step_ms))
        done += points + 1
    return grid


class PrometheusSamples:
    """The ``prometheus`` backend's :class:`~hpcscope.model.backends.GpuSampleReader`.

    Args:
        engine: the engine's client (or its base URL: a client with default settings).
        step_seconds: resolution of the read: the scrape interval of the dcgm-exporter job.
        lookback_seconds: how far back a read with no ``since`` goes.
        now: the clock (tests pass a fixed one).
        transport: an httpx2 transport for a client made from a URL (tests).
    """

    def __init__(
        self,
        engine: EngineClient | str,
        *,
        step_seconds: float,
        lookback_seconds: float,
        timeout_seconds: float = 30.0,
        now: Callable[[], datetime] = utcnow,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        if isinstance(engine, str):
            config = EngineConfig(url=engine.rstrip("/"), timeout_seconds=timeout_seconds)
            engine = EngineClient(config, transport=transport)
        self.engine = engine
        self.url = engine.url
        self.step_seconds = step_seconds
        self.lookback_seconds = lookback_seconds
        self._now = now

    def samples_for_jobs(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pa.Table:
        """GPU samples of the given jobs (the caller has already checked visibility)."""
        if not job_ids:
            return GPU_SAMPLE_SCHEMA.empty_table()
        end = as_naive_utc(until) if until is not None else self._now()
        start = (
            as_naive_utc(since)
            if since is not None
            else end - timedelta(seconds=self.lookback_seconds)
        )
        if start > end:
            return GPU_SAMPLE_SCHEMA.empty_table()
        query = dcgm_series_selector(job_ids)
        source = f"{self.url}/api/v1/query_range"
        tables = []
        for chunk_start, chunk_end, step_ms in read_grid(start, end, self.step_seconds):
            answer = self.engine.query_range(
                query, start=chunk_start / 1000, end=chunk_end / 1000, step=step_ms / 1000
            )
            tables.append(dcgm_series_to_samples(answer.series, source=source))
        return pa.concat_tables(tables)
