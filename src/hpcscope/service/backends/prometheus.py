"""The ``prometheus`` metrics backend: every GPU-sample read answered by a site's Prometheus,
VictoriaMetrics, Thanos or Mimir over its HTTP API (:class:`PrometheusSamples`).

Reads go through the engine's :class:`~hpcscope.service.backends.client.EngineClient`
(authentication, retries, limits). What a report reads of a job's GPUs
(:meth:`PrometheusSamples.job_gpus`) comes from the engine recording rules when they cover the
window (:mod:`hpcscope.service.backends.rule_reads`), else from raw samples:

- a window of at most :data:`MAX_RAW_STEPS` scrape intervals is read sample by sample: the
  selector of every dcgm-exporter series of the jobs (``hpc_job``) as a range selector, the
  samples at their own times (:func:`hpcscope.service.backends.engine_live.raw_range`); the
  answer becomes the same Arrow table the embedded store returns
  (:func:`hpcscope.ingest.promql.dcgm_series_to_samples`);
- a longer window is read at a bounded step (the window over :data:`MAX_RAW_STEPS`): each
  field's mean (``avg_over_time``; the largest value for counters, maxima, clock reasons and
  Xids) per step, each point weighing one step.

Each read says which it was (:class:`~hpcscope.model.backends.ReadSource`). The live reads
(newest samples, last seen, jobs seen) are in :mod:`hpcscope.service.backends.engine_live`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

import httpx2
import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.aggregates import gpu_time_of, summary_from_aggregates
from hpcscope.analysis.jobs.efficiency import empty_summary, gpu_summary
from hpcscope.ingest.promql import Series, dcgm_series_selector, dcgm_series_to_samples
from hpcscope.ingest.promql.matrix import job_matcher
from hpcscope.model.backends import (
    GpuTime,
    JobGpuRead,
    MetricsBackend,
    ReadSource,
    TimeseriesRead,
)
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import as_naive_utc, epoch_seconds, utcnow
from hpcscope.service.backends import engine_live
from hpcscope.service.backends.client import EngineClient, EngineConfig
from hpcscope.service.backends.engine_live import MAX_POINTS_PER_QUERY
from hpcscope.service.backends.engine_rules import (
    ENERGY,
    FB_USED,
    MEAN_FIELDS,
    SHIPPED_DELAY_SECONDS,
    SHIPPED_WINDOW_SECONDS,
    TEMP,
    THROTTLE,
    UTIL,
    XID,
    RuleNames,
)
from hpcscope.service.backends.rule_reads import RuleReads, factor
from hpcscope.service.engine_settings import RuleUse

#: Most steps of a raw read per series: a longer window is read at a coarser step.
MAX_RAW_STEPS = 1_440
#: The fields a report reads at a bounded step, and how a step folds them.
DOWNSAMPLED: dict[str, str] = {
    **dict.fromkeys(MEAN_FIELDS, "avg_over_time"),
    TEMP: "max_over_time",
    FB_USED: "max_over_time",
    ENERGY: "max_over_time",
    THROTTLE: "max_over_time",
    XID: "max_over_time",
}


class PrometheusSamples:
    """The ``prometheus`` backend's :class:`~hpcscope.model.backends.GpuMetrics`.

    Args:
        engine: the engine's client (or its base URL: a client with default settings).
        step_seconds: the scrape interval of the dcgm-exporter job (the raw resolution).
        lookback_seconds: how far back a read with no ``since`` goes.
        recording_rules: read the engine recording rules (``auto``: when they cover the
            window), ``always`` or ``never``.
        rule_window_seconds: the rules' evaluation interval as loaded (60 as shipped).
        rule_delay_seconds: how far behind its evaluation a rule's window ends, as loaded (60
            as shipped).
        now: the clock (tests pass a fixed one).
        transport: an httpx2 transport for a client made from a URL (tests).
    """

    def __init__(
        self,
        engine: EngineClient | str,
        *,
        step_seconds: float,
        lookback_seconds: float,
        recording_rules: RuleUse = "auto",
        rule_window_seconds: int = SHIPPED_WINDOW_SECONDS,
        rule_delay_seconds: int = SHIPPED_DELAY_SECONDS,
        timeout_seconds: float = 30.0,
        now: Callable[[], datetime] = utcnow,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        self._owns_engine = isinstance(engine, str)  # made here: closed here
        if isinstance(engine, str):
            config = EngineConfig(url=engine.rstrip("/"), timeout_seconds=timeout_seconds)
            engine = EngineClient(config, transport=transport)
        self.engine = engine
        self.url = engine.url
        self.step_seconds = step_seconds
        self.lookback_seconds = lookback_seconds
        self.recording_rules = recording_rules
        self._now = now
        self.rules = RuleReads(
            engine,
            RuleNames(rule_window_seconds, rule_delay_seconds),
            lookback_seconds=lookback_seconds,
            now=now,
        )

    @property
    def backend(self) -> MetricsBackend:
        return "prometheus"

    @property
    def lag_seconds(self) -> float:
        """A rule window, its delay and two scrape intervals (a sample lands, its window is
        evaluated)."""
        names = self.rules.names
        rules = 0 if self.recording_rules == "never" else names.window_seconds + names.delay_seconds
        return rules + 2 * self.step_seconds

    def close(self) -> None:
        self.rules.close()
        if self._owns_engine:
            self.engine.close()

    def _window(self, since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
        end = as_naive_utc(until) if until is not None else self._now()
        start = (
            as_naive_utc(since)
            if since is not None
            else end - timedelta(seconds=self.lookback_seconds)
        )
        return start, end

    def use_rules(self, start: datetime) -> bool:
        """Whether a read from ``start`` reads the recording rules (the setting, the probe)."""
        if self.recording_rules == "never":
            return False
        if self.recording_rules == "always":
            return True
        return self.rules.coverage().covers(start, window_seconds=self.rules.window_seconds)

    # ------------------------------------------------------------------ raw samples

    def samples_for_jobs(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pa.Table:
        """Raw GPU samples of the given jobs (the caller has already checked visibility)."""
        if not job_ids:
            return GPU_SAMPLE_SCHEMA.empty_table()
        start, end = self._window(since, until)
        if start > end:
            return GPU_SAMPLE_SCHEMA.empty_table()
        selector = dcgm_series_selector(job_ids)
        return engine_live.raw_samples(
            self.engine, selector, since=start, until=end, step=self.step_seconds
        )

    def _downsampled(
        self, job_ids: Sequence[str], *, start: datetime, end: datetime, step: int
    ) -> pa.Table:
        """The report's fields per ``step`` seconds (see the module docstring)."""
        selector = "{" + job_matcher(job_ids) + "}"
        first = math.floor(epoch_seconds(start) / step) * step + step
        last = math.ceil(epoch_seconds(end) / step) * step
        series: list[Series] = []
        for field, fold in DOWNSAMPLED.items():
            answer = self.engine.query_range(
                f"{fold}({field}{selector}[{step}s])",
                start=float(first),
                end=float(last),
                step=float(step),
            )
            series += [
                Series({**s.labels, "__name__": field}, s.times, s.values) for s in answer.series
            ]
        return dcgm_series_to_samples(series, source=f"{self.url}/api/v1/query_range")

    # ------------------------------------------------------------------ reads

    def job_gpus(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobGpuRead:
        """What a report reads of the jobs' GPUs (the module docstring)."""
        start, end = self._window(since, until)
        if job_ids and self.use_rules(start):
            window = float(self.rules.window_seconds)
            return JobGpuRead(
                ReadSource("prometheus", "recording_rules", window),
                aggregates=self.rules.aggregates(job_ids, since=start, until=end),
            )
        span = max(0.0, (end - start).total_seconds())
        step = max(self.step_seconds, math.ceil(span / MAX_RAW_STEPS))
        if step <= self.step_seconds or not job_ids:
            samples = self.samples_for_jobs(job_ids, since=start, until=end)
            return JobGpuRead(
                ReadSource("prometheus", "query_range", self.step_seconds), samples=samples
            )
        cap = max(max_sample_weight_seconds(self.step_seconds), float(step))
        return JobGpuRead(
            ReadSource("prometheus", "query_range", float(step)),
            samples=self._downsampled(job_ids, start=start, end=end, step=int(step)),
            max_interval_seconds=cap,
        )

    def jobs_seen(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        job_ids: Sequence[str] | None = None,
    ) -> list[str]:
        start, end = self._window(since, until)
        start = max(start, end - timedelta(seconds=self.lookback_seconds))
        if self.use_rules(start):
            return self.rules.jobs_seen(since=start, until=end, job_ids=job_ids)
        return engine_live.jobs_seen(self.engine, since=start, until=end, job_ids=job_ids)

    def latest(self, *, since: datetime, until: datetime | None = None) -> pa.Table:
        _, end = self._window(since, until)
        return engine_live.latest(self.engine, since=as_naive_utc(since), until=end)

    def last_seen(self, *, since: datetime) -> Mapping[tuple[str, int], datetime]:
        return engine_live.last_seen(
            self.engine, since=as_naive_utc(since), until=self._now(), step=self.step_seconds
        )

    def gpu_time(
        self,
        job_ids: Sequence[str] | None,
        *,
        since: datetime,
        until: datetime,
        max_interval_seconds: float,
    ) -> GpuTime:
        """The diagram's GPU time from what :meth:`job_gpus` reads over the window."""
        ids = list(job_ids) if job_ids is not None else self.jobs_seen(since=since, until=until)
        if not ids:
            return gpu_time_of(empty_summary())
        read = self.job_gpus(ids, since=since, until=until)
        if read.aggregates is not None:
            frame = pl.from_arrow(read.aggregates)
            assert isinstance(frame, pl.DataFrame)
            return gpu_time_of(summary_from_aggregates(frame))
        samples = pl.from_arrow(
            read.samples if read.samples is not None else GPU_SAMPLE_SCHEMA.empty_table()
        )
        assert isinstance(samples, pl.DataFrame)
        cap = read.max_interval_seconds or max_interval_seconds
        return gpu_time_of(gpu_summary(samples, max_interval_seconds=cap))

    def idle_gpu_samples(self, *, since: datetime, until: datetime) -> pa.Table:
        return engine_live.idle_gpu_samples(
            self.engine,
            since=as_naive_utc(since),
            until=as_naive_utc(until),
            step=self.step_seconds,
        )

    def xid_counts(self, *, since: datetime, until: datetime) -> pa.Table:
        return engine_live.xid_counts(
            self.engine,
            since=as_naive_utc(since),
            until=as_naive_utc(until),
            step=self.step_seconds,
        )

    def gpu_timeseries(
        self,
        job_ids: Sequence[str],
        *,
        bucket_seconds: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> TimeseriesRead:
        start, end = self._window(since, until)
        window = self.rules.window_seconds
        if job_ids and bucket_seconds % window == 0 and self.use_rules(start):
            table = self.rules.timeseries(
                job_ids, bucket_seconds=bucket_seconds, since=start, until=end
            )
            return TimeseriesRead(table, ReadSource("prometheus", "recording_rules", window))
        bucket = max(bucket_seconds, math.ceil(self.step_seconds))
        table = engine_live.bucket_means(
            self.engine, job_ids, bucket_seconds=bucket, since=start, until=end
        )
        return TimeseriesRead(table, ReadSource("prometheus", "query_range", float(bucket)))


__all__ = ["MAX_POINTS_PER_QUERY", "UTIL", "PrometheusSamples", "factor"]
