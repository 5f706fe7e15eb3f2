"""Good and valid events of the three SLOs, from job records; window sums, status, history.

Input (``jobs``): one row per job, the ``jobs`` table's columns ``job_id``, ``user``,
``account``, ``partition``, ``qos``, ``submit_time``, ``start_time``, ``end_time`` (naive UTC
datetimes, nulls allowed), plus ``exit_cause`` (the kept summary's, or the service's
``exit_cause`` of the Slurm state for a job without summary; null while the job runs) and the
summary's ``useful_gpu_seconds``, ``allocated_gpu_seconds`` and ``observed_gpu_seconds`` (null
without summary; a frame without ``observed_gpu_seconds`` is read as having none).

Output (an *events* frame): ``job_id``, ``user``, ``account``, ``partition``, ``qos``,
``event_time`` (when the event became known), ``good`` and ``total`` (float64: 0/1 and 1 for the
job SLOs, GPU-seconds for the efficiency SLO), and per SLO a detail column.

* **queue wait**: a job that starts within ``threshold_seconds`` of its submission is one good
  event at its start; a job that waited longer (started late, still pending, or cancelled while
  pending after the threshold) is one bad event at ``submit + threshold``, the moment it became
  bad, so a stuck queue burns the budget before the jobs start. ``wait_seconds`` is
  ``start - submit`` of started jobs (Slurm's submit/start, XDMoD's wait).
* **job success**: one event per ended job at its end, good when its cause is ``success``;
  ``cancelled`` jobs (a person's choice) are not valid events. ``cause`` keeps the cause.
* **GPU efficiency**: per summarised job at its end, good = useful GPU-seconds (SM active x
  time), total = allocated GPU-seconds, both as charged
  (:func:`hpcscope.model.gpu_time.charged_gpu_seconds`: the allocation, else the observed
  seconds; useful capped at it): the SLI is useful / allocated GPU-hours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt
import polars as pl

from hpcscope.analysis.gpu_time import charged_gpu_seconds_exprs
from hpcscope.analysis.slo.budget import (
    BurnRatePair,
    budget_remaining_ratio,
    burn_rate,
    pair_fires,
    sli_ratio,
)

#: Columns every events frame has, in order.
EVENT_COLUMNS = ("job_id", "user", "account", "partition", "qos", "event_time", "good", "total")

#: Exit causes that are not valid events of the success SLO.
NOT_COUNTED_CAUSES = frozenset({"cancelled"})


def _seconds(expr: pl.Expr) -> pl.Expr:
    return expr.dt.total_microseconds().cast(pl.Float64) / 1e6


def queue_wait_events(
    jobs: pl.DataFrame, *, threshold_seconds: float, now: datetime
) -> pl.DataFrame:
    """Queue-wait events (module docstring); adds ``start_time`` and ``wait_seconds``.

    Args:
        jobs: job records (module docstring); jobs without ``submit_time`` are skipped.
        threshold_seconds: the longest wait that is still good.
        now: the evaluation time: a pending job is bad once ``now`` passes its threshold.
    """
    limit = timedelta(seconds=threshold_seconds)
    rows = jobs.filter(pl.col("submit_time").is_not_null())
    waited_until = pl.coalesce(pl.col("start_time"), pl.col("end_time"), pl.lit(now))
    waited = _seconds(waited_until - pl.col("submit_time"))
    good = pl.col("start_time").is_not_null() & (waited <= threshold_seconds)
    bad = waited > threshold_seconds
    return (
        rows.with_columns(
            pl.when(good)
            .then(pl.col("start_time"))
            .when(bad)
            .then(pl.col("submit_time") + limit)
            .otherwise(None)
            .alias("event_time"),
            pl.when(good).then(1.0).otherwise(0.0).alias("good"),
            pl.lit(1.0).alias("total"),
            pl.when(pl.col("start_time").is_not_null())
            .then(pl.max_horizontal(_seconds(pl.col("start_time") - pl.col("submit_time")), 0.0))
            .otherwise(None)
            .alias("wait_seconds"),
        )
        .filter(pl.col("event_time").is_not_null() & (pl.col("event_time") <= now))
        .select(*EVENT_COLUMNS, "start_time", "wait_seconds")
    )


def success_events(jobs: pl.DataFrame) -> pl.DataFrame:
    """Job-success events (module docstring); adds ``cause``."""
    return (
        jobs.filter(
            pl.col("end_time").is_not_null()
            & pl.col("exit_cause").is_not_null()
            & ~pl.col("exit_cause").is_in(sorted(NOT_COUNTED_CAUSES))
        )
        .with_columns(
            pl.col("end_time").alias("event_time"),
            pl.when(pl.col("exit_cause") == "success").then(1.0).otherwise(0.0).alias("good"),
            pl.lit(1.0).alias("total"),
            pl.col("exit_cause").alias("cause"),
        )
        .select(*EVENT_COLUMNS, "cause")
    )


def efficiency_events(jobs: pl.DataFrame) -> pl.DataFrame:
    """GPU-efficiency events in GPU-seconds (module docstring)."""
    if "observed_gpu_seconds" not in jobs.columns:
        jobs = jobs.with_columns(pl.lit(None, dtype=pl.Float64).alias("observed_gpu_seconds"))
    allocated, useful = charged_gpu_seconds_exprs()
    return (
        jobs.with_columns(
            pl.col("end_time").alias("event_time"), useful.alias("good"), allocated.alias("total")
        )
        .filter(pl.col("end_time").is_not_null() & (pl.col("total") > 0))
        .select(*EVENT_COLUMNS)
    )


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class EventWindows:
    """An events frame's times, good and total in event-time order, for window sums.

    A report sums the same events over many windows (the SLO window, each alert window, a
    day per history bucket, each account): one sort, then two binary searches and two slice
    sums per window, instead of a frame filter per window (about half a millisecond each, a
    hundred per report). Times are microseconds since the epoch (naive UTC), the frames'
    precision; events without a time are in no window; a null ``good`` or ``total`` adds
    nothing (as a frame's sum skips it).
    """

    times_us: npt.NDArray[np.int64]
    good: npt.NDArray[np.float64]
    total: npt.NDArray[np.float64]

    @classmethod
    def of(cls, events: pl.DataFrame) -> EventWindows:
        rows = events.select("event_time", "good", "total").filter(
            pl.col("event_time").is_not_null()
        )
        rows = rows.sort("event_time", maintain_order=True)
        return cls(
            rows["event_time"].dt.epoch("us").to_numpy().astype(np.int64),
            rows["good"].cast(pl.Float64).fill_null(0.0).to_numpy(),
            rows["total"].cast(pl.Float64).fill_null(0.0).to_numpy(),
        )

    def sums(self, *, start: datetime, end: datetime) -> tuple[float, float]:
        """Good and total of the events with ``start < event_time <= end``."""
        first = int(np.searchsorted(self.times_us, _microseconds(start), side="right"))
        stop = int(np.searchsorted(self.times_us, _microseconds(end), side="right"))
        if stop <= first:
            return 0.0, 0.0
        return float(self.good[first:stop].sum()), float(self.total[first:stop].sum())


def _microseconds(at: datetime) -> int:
    return (at.replace(tzinfo=None) - _EPOCH) // _MICROSECOND


def window_sums(events: pl.DataFrame, *, start: datetime, end: datetime) -> tuple[float, float]:
    """Good and total of the events with ``start < event_time <= end``."""
    return EventWindows.of(events).sums(start=start, end=end)


def _windows(events: pl.DataFrame | EventWindows) -> EventWindows:
    """A caller that sums the same events again (status, then history) sorts them once."""
    return events if isinstance(events, EventWindows) else EventWindows.of(events)


@dataclass(frozen=True, slots=True)
class WindowBurn:
    """The burn rate over one window ending at the evaluation time."""

    window_seconds: float
    good: float
    total: float
    burn_rate: float | None


@dataclass(frozen=True, slots=True)
class SloStatus:
    """One SLO evaluated at one time.

    Attributes:
        good / total: events in the SLO window.
        sli_ratio: good / total (None without events).
        budget_remaining_ratio: see :func:`~hpcscope.analysis.slo.budget.budget_remaining_ratio`.
        burns: the burn rate over each alert window (long and short of every pair).
        firing: the pairs whose multiwindow condition holds.
    """

    objective_ratio: float
    window_seconds: float
    good: float
    total: float
    sli_ratio: float | None
    budget_remaining_ratio: float
    burns: tuple[WindowBurn, ...]
    firing: tuple[BurnRatePair, ...]

    def burn(self, window_seconds: float) -> float | None:
        """The burn rate over ``window_seconds`` (one of the pairs' windows)."""
        for burn in self.burns:
            if burn.window_seconds == window_seconds:
                return burn.burn_rate
        raise KeyError(window_seconds)


def slo_status(
    events: pl.DataFrame | EventWindows,
    *,
    now: datetime,
    objective_ratio: float,
    window_seconds: float,
    pairs: Sequence[BurnRatePair],
) -> SloStatus:
    """Evaluate one SLO at ``now`` over its window and the pairs' alert windows."""
    sums = _windows(events).sums
    good, total = sums(start=now - timedelta(seconds=window_seconds), end=now)
    windows = sorted({w for p in pairs for w in (p.long_window_seconds, p.short_window_seconds)})
    burns: list[WindowBurn] = []
    for seconds in windows:
        g, t = sums(start=now - timedelta(seconds=seconds), end=now)
        burns.append(WindowBurn(seconds, g, t, burn_rate(g, t, objective_ratio=objective_ratio)))
    by_window = {b.window_seconds: b.burn_rate for b in burns}
    firing = tuple(
        p
        for p in pairs
        if pair_fires(by_window[p.long_window_seconds], by_window[p.short_window_seconds], p)
    )
    return SloStatus(
        objective_ratio=objective_ratio,
        window_seconds=window_seconds,
        good=good,
        total=total,
        sli_ratio=sli_ratio(good, total),
        budget_remaining_ratio=budget_remaining_ratio(good, total, objective_ratio=objective_ratio),
        burns=tuple(burns),
        firing=firing,
    )


def history(
    events: pl.DataFrame | EventWindows, *, start: datetime, end: datetime, bucket_seconds: float
) -> pl.DataFrame:
    """Good, total and SLI per bucket from ``start`` to ``end`` (every bucket, empty ones too).

    Returns:
        ``bucket_start`` (datetime), ``good``, ``total`` (float64), ``sli_ratio`` (null when the
        bucket has no event); a bucket holds ``bucket_start < event_time <= bucket_start + size``.
    """
    size = timedelta(seconds=bucket_seconds)
    sums = _windows(events).sums
    rows: list[dict[str, object]] = []
    at = start
    while at < end:
        good, total = sums(start=at, end=min(at + size, end))
        rows.append(
            {"bucket_start": at, "good": good, "total": total, "sli_ratio": sli_ratio(good, total)}
        )
        at += size
    return pl.DataFrame(
        rows,
        schema={
            "bucket_start": pl.Datetime("us"),
            "good": pl.Float64,
            "total": pl.Float64,
            "sli_ratio": pl.Float64,
        },
    )


def wait_percentiles(
    queue_events: pl.DataFrame, *, start: datetime, end: datetime, by: Sequence[str]
) -> pl.DataFrame:
    """p50 and p95 queue wait of the jobs that started in ``(start, end]``, per group.

    Percentiles interpolate linearly between order statistics (numpy's default, Hyndman and
    Fan's type 7).

    Returns:
        ``by`` columns, ``jobs`` (u32), ``p50_wait_seconds``, ``p95_wait_seconds`` (float64),
        sorted by the groups.
    """
    started = queue_events.filter(
        pl.col("wait_seconds").is_not_null()
        & (pl.col("start_time") > start)
        & (pl.col("start_time") <= end)
    )
    return (
        started.group_by(list(by))
        .agg(
            pl.len().alias("jobs"),
            pl.col("wait_seconds").quantile(0.5, interpolation="linear").alias("p50_wait_seconds"),
            pl.col("wait_seconds").quantile(0.95, interpolation="linear").alias("p95_wait_seconds"),
        )
        .sort(list(by), nulls_last=True)
    )


def causes(jobs: pl.DataFrame, *, start: datetime, end: datetime) -> dict[str, int]:
    """Ended jobs per exit cause (``success``, ``cancelled`` and every failure cause) whose end
    is in ``(start, end]``; jobs without a cause (still running) are left out."""
    inside = jobs.filter(
        pl.col("exit_cause").is_not_null()
        & (pl.col("end_time") > start)
        & (pl.col("end_time") <= end)
    )
    counts = inside.group_by("exit_cause").agg(pl.len().alias("n")).sort("exit_cause")
    return {str(r["exit_cause"]): int(r["n"]) for r in counts.iter_rows(named=True)}
