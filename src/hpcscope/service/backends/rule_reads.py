"""Reads of the engine recording rules (``deploy/prometheus/hpcscope-engine-rules.yml``).

A report of jobs over ``[since, until]`` asks one instant query per column: ``sum_over_time``
of the sums, counts and seconds the rules recorded over the window, ``max_over_time`` of the
maxima, the last Xid, and the first and last evaluation covering the jobs' GPUs; the answers
hold one value per job GPU (:mod:`hpcscope.ingest.promql.aggregates`).
A 1024-GPU job over a day is 24 answers of 1,024 values, never its 88 M raw samples; a read of
the per-GPU verdicts asks the 6 columns they use (``columns``).

An evaluation at ``t`` covers ``(t - D - W, t - D]`` (``D``: the rules' delay,
:class:`~hpcscope.service.backends.engine_rules.RuleNames`): a read up to ``until`` asks at
``until + D``, and the times it answers (the coverage, the first and last covered samples, the
buckets) are those of the samples, ``D`` before the evaluations'.

Whether the rules are there is probed (:meth:`RuleReads.coverage`): the newest evaluation of the
per-job rule, and the oldest within the lookback. A window that starts before the rules did is
read from raw samples instead (``prometheus_recording_rules: auto``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa

from hpcscope.ingest.dcgm_fields import FIELDS_BY_EXPORTED_NAME
from hpcscope.ingest.promql import Series, job_matcher
from hpcscope.ingest.promql.aggregates import bucket_table, to_datetime
from hpcscope.model.backends import GPU_AGGREGATE_SCHEMA
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends.client import EngineClient
from hpcscope.service.backends.engine_rules import (
    ENERGY,
    FB_USED,
    MEAN_FIELDS,
    SM_ACTIVE,
    TEMP,
    THROTTLE,
    UTIL,
    XID,
    RuleNames,
)
from hpcscope.service.backends.rule_cache import (
    SETTLED_SECONDS,
    ProbeAnswers,
    RuleAnswers,
    Window,
)
from hpcscope.service.backends.vectors import Vector, gpu_columns

#: Parallel queries of one read (the engine answers each on its own core).
QUERY_THREADS = 6
#: How long a probe of the rules' presence is trusted.
PROBE_SECONDS = 60.0
#: The engine's staleness lookback: an instant sees a series' sample this long after it.
LOOKBACK_SECONDS = 300
#: A read's start may precede the rules' first evaluation by this much (the margin a report
#: reads before a job's start: its first samples are after it).
START_SLACK = timedelta(minutes=2)


def factor(field: str) -> float:
    """The factor from a DCGM field's exported unit to hpcscope's base unit."""
    return FIELDS_BY_EXPORTED_NAME[field].factor


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which times the rules cover: from ``since`` (the end of their oldest evaluation's window
    within the lookback) to ``until`` (the end of their newest's); both None when the engine
    has none."""

    since: datetime | None
    until: datetime | None

    def covers(self, start: datetime, *, window_seconds: float) -> bool:
        """Whether a read from ``start`` finds rules from its start on: their first evaluation
        within one window and :data:`START_SLACK` of it (a report reads from a job's start
        less a margin for clocks, ``service/jobs/reports.py``)."""
        if self.since is None:
            return False
        return self.since <= start + timedelta(seconds=window_seconds) + START_SLACK


def _first(series: Sequence[Series]) -> float | None:
    """The value of a one-series answer (None: no series, or NaN)."""
    value = series[0].last if series else math.nan
    return None if math.isnan(value) else float(value)


def _value(vector: Vector) -> float | None:
    """The value of a one-series answer (None: no series, or NaN)."""
    value = float(vector.values[0]) if len(vector) else math.nan
    return None if math.isnan(value) else value


def _range(start: datetime, end: datetime, window_seconds: int) -> str:
    return f"{max(window_seconds, math.ceil((end - start).total_seconds()))}s"


class RuleReads:
    """The recording-rule side of the prometheus backend.

    Args:
        engine: the engine's client.
        names: the rules' names (their window).
        lookback_seconds: how far back the probe looks for the rules' oldest evaluation.
        now: the clock.
        fresh_seconds: how long an answer that may change is kept (the scrape interval,
            :mod:`.rule_cache`; 0: not kept).
    """

    def __init__(
        self,
        engine: EngineClient,
        names: RuleNames,
        *,
        lookback_seconds: float,
        now: Callable[[], datetime],
        fresh_seconds: float = 0.0,
    ) -> None:
        self.engine = engine
        self.names = names
        self.lookback_seconds = lookback_seconds
        self._now = now
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._probed: tuple[float, Coverage] | None = None
        settled = max(SETTLED_SECONDS, float(names.delay_seconds))
        self.answers = RuleAnswers(settled_seconds=settled, fresh_seconds=fresh_seconds)
        self.probes = ProbeAnswers(interval_seconds=names.window_seconds, settled_seconds=settled)

    @property
    def window_seconds(self) -> int:
        return self.names.window_seconds

    @property
    def delay(self) -> timedelta:
        return timedelta(seconds=self.names.delay_seconds)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="engine-read")
            return self._pool

    def _queries(self, exprs: dict[str, str], at: datetime) -> dict[str, Sequence[Series]]:
        pool = self._executor()
        futures = {name: pool.submit(self.engine.query, e, at=at) for name, e in exprs.items()}
        return {name: future.result().series for name, future in futures.items()}

    def _vectors(self, exprs: dict[str, str], at: datetime) -> dict[str, Vector]:
        """:meth:`_queries` of instant vectors, decoded column-wise."""
        pool = self._executor()
        futures = {
            name: pool.submit(self.engine.query_vector, e, at=at) for name, e in exprs.items()
        }
        return {name: future.result() for name, future in futures.items()}

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    # ------------------------------------------------------------------ probe

    def coverage(self) -> Coverage:
        """When the rules' per-job series exist (cached :data:`PROBE_SECONDS`)."""
        now = self._now()
        stamp = epoch_seconds(now)
        with self._lock:
            if self._probed is not None and stamp - self._probed[0] < PROBE_SECONDS:
                return self._probed[1]
        job_rule = self.names.job(UTIL, "observed_gpu_seconds")
        step = max(self.window_seconds, math.ceil(self.lookback_seconds / 1000))
        span = f"{math.ceil(self.lookback_seconds)}s"
        found = self._queries(
            {
                "since": f"min(min_over_time(timestamp({job_rule})[{span}:{step}s]))",
                "until": f"max(timestamp({job_rule}))",
            },
            now,
        )
        oldest, newest = _first(found["since"]), _first(found["until"])
        # the subquery sees the rules only at multiples of ``step``: their first evaluation is
        # found at the rules' own window over the step before that point (before now when it
        # saw none: rules that started less than a step ago)
        stale = LOOKBACK_SECONDS
        at = stamp if oldest is None else min(stamp, oldest + step + stale)
        reach = (step + stale) if oldest is None else (2 * step + stale)
        fine = f"min(min_over_time(timestamp({job_rule})[{reach}s:{self.window_seconds}s]))"
        first = _first(self._queries({"since": fine}, to_datetime(at))["since"])
        if first is not None:
            oldest = first if oldest is None else min(oldest, first)
        if oldest is None:
            result = Coverage(None, None)
        else:
            # the samples' times: an evaluation's window ends ``delay`` before it
            delay = self.names.delay_seconds
            result = Coverage(to_datetime(oldest - delay), to_datetime((newest or oldest) - delay))
        with self._lock:
            self._probed = (stamp, result)
        return result

    # ------------------------------------------------------------------ reads

    def aggregates(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime,
        until: datetime,
        columns: Collection[str] | None = None,
    ) -> pa.Table:
        """:data:`GPU_AGGREGATE_SCHEMA` rows of the jobs' GPUs over ``[since, until]``.

        ``columns``: ask only these columns (one query each; None: every column); the others
        are null. A GPU is a row when an asked column has a value for it."""
        names = self.names
        selector = "{" + job_matcher(job_ids) + "}"
        span = _range(since, until, self.window_seconds)

        def total(rule: str) -> str:
            return f"sum_over_time({rule}{selector}[{span}])"

        exprs = {
            "observed_seconds": total(names.observed),
            "useful_seconds": total(names.useful),
            "energy_joules": total(names.gpu(ENERGY, "increase")),
            "max_temperature_celsius": f"max_over_time({names.gpu(TEMP, 'max')}{selector}[{span}])",
            "max_fb_used_bytes": f"max_over_time({names.gpu(FB_USED, 'max')}{selector}[{span}])",
            "slowdown_seconds": total(names.gpu(THROTTLE, "slowdown_seconds")),
            "thermal_seconds": total(names.gpu(THROTTLE, "thermal_seconds")),
            "xid": f"last_over_time({names.gpu(XID, 'changed_last')}{selector}[{span}])",
            "first_ts": f"min_over_time(timestamp({names.observed}{selector})"
            f"[{span}:{self.window_seconds}s]) - {self.window_seconds + names.delay_seconds}",
            "last_ts": f"max_over_time(timestamp({names.observed}{selector})"
            f"[{span}:{self.window_seconds}s]) - {names.delay_seconds}",
        }
        factors = {
            "energy_joules": factor(ENERGY),
            "max_fb_used_bytes": factor(FB_USED),
        }
        for field, column in MEAN_FIELDS.items():
            exprs[f"{column}_sum"] = total(names.gpu(field, "sum"))
            exprs[f"{column}_count"] = total(names.gpu(field, "count"))
            factors[f"{column}_sum"] = factor(field)
        if columns is not None:
            unknown = set(columns) - set(exprs)
            if unknown:
                raise ValueError(f"not a column of the rules' aggregates: {sorted(unknown)}")
            exprs = {name: expr for name, expr in exprs.items() if name in columns}
        at = until + self.delay

        def compute() -> pa.Table:
            return gpu_columns(
                self._vectors(exprs, at),
                schema=GPU_AGGREGATE_SCHEMA,
                factors=factors,
                source=f"{self.engine.url} recording rules",
            )

        window = self._held(
            selector, at=at, span=span, subqueries=bool({"first_ts", "last_ts"} & set(exprs))
        )
        return self.answers.read(
            (selector, tuple(sorted(exprs))),
            window,
            compute,
            clock=lambda: epoch_seconds(self._now()),
            interval_seconds=self.window_seconds,
        )

    def _held(self, selector: str, *, at: datetime, span: str, subqueries: bool) -> Window:
        """Which evaluations a read at ``at`` over ``span`` holds (:mod:`.rule_cache`): the
        probes' answers when they are known, else asked."""
        end = float(f"{epoch_seconds(at):.3f}")  # the time as the query sends it
        start = end - float(span.removesuffix("s"))
        probe = f"max(timestamp({self.names.observed}{selector}))"
        asked = epoch_seconds(self._now())
        newest = self.probes.newest(selector, end, now=asked)
        known, before = self.probes.before(selector, start)
        if newest is None or not known:
            pool = self._executor()
            ask_newest = (
                pool.submit(self.engine.query_vector, probe, at=end) if newest is None else None
            )
            ask_before = None if known else pool.submit(self.engine.query_vector, probe, at=start)
            if ask_before is not None:
                before = _value(ask_before.result())
                self.probes.keep_before(selector, start, before, asked=asked)
            if ask_newest is not None:
                newest = _value(ask_newest.result())
                answered = epoch_seconds(self._now())
                self.probes.keep_newest(selector, newest, asked_at=end, answered_by=answered)
        step = float(self.window_seconds)
        steps = None
        if subqueries:  # a subquery's steps are the multiples of its step in the window
            steps = (math.ceil(start / step) + (start % step == 0) / 2, end // step)
        return Window(before, newest, start, steps)

    def timeseries(
        self, job_ids: Sequence[str], *, bucket_seconds: int, since: datetime, until: datetime
    ) -> pa.Table:
        """Per job GPU and bucket (a multiple of the rules' window): the three means."""
        names = self.names
        selector = "{" + job_matcher(job_ids) + "}"
        b = f"{bucket_seconds}s"
        by = "sum by (hpc_job, node, gpu)"
        exprs = {
            column: f"{by} (sum_over_time({names.gpu(field, 'sum')}{selector}[{b}]))"
            f" / {by} (sum_over_time({names.gpu(field, 'count')}{selector}[{b}]))"
            for field, column in MEAN_FIELDS.items()
            if column in ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio")
        }
        start = math.floor(epoch_seconds(since) / bucket_seconds) * bucket_seconds + bucket_seconds
        end = math.ceil(epoch_seconds(until) / bucket_seconds) * bucket_seconds
        # the bucket of samples in (T - b, T] is the evaluations in (T + D - b, T + D]
        delay = self.names.delay_seconds
        answers = {
            column: self.engine.query_range(
                expr, start=float(start + delay), end=float(end + delay), step=float(bucket_seconds)
            ).series
            for column, expr in exprs.items()
        }
        return bucket_table(
            answers,
            bucket_seconds=bucket_seconds,
            delay_seconds=delay,
            factors={"reported_util_ratio": factor(UTIL)},
            source=f"{self.engine.url} recording rules",
        )

    def jobs_seen(
        self, *, since: datetime, until: datetime, job_ids: Sequence[str] | None
    ) -> list[str]:
        """Jobs with an evaluation of the per-job rule in ``[since, until]``."""
        matcher = job_matcher(job_ids) if job_ids else 'hpc_job!~"|0"'
        rule = self.names.job(UTIL, "observed_gpu_seconds")
        span = _range(since, until, self.window_seconds)
        answer = self.engine.query(
            f"count by (hpc_job) (count_over_time({rule}{{{matcher}}}[{span}]))",
            at=until + self.delay,
        )
        return sorted({s.labels["hpc_job"] for s in answer.series if s.labels.get("hpc_job")})


__all__ = ["SM_ACTIVE", "Coverage", "RuleReads", "factor"]
