"""The InfiniBand part of the rules' window in the form the rules judge it, kept run to run.

The RD rules never need the raw port rows once they are turned into three things
(:class:`IbView`): each node's series of intervals (RD-1, RD-2, RD-2b, RD-3, RD-7), the
intervals where one of RD-5's counters rose, and the counters that went down (RD-6). At 128
nodes x 8 ports read every 2 s, RD-2b's hour is 1.8 M port rows of 41 counters (600 MB as a
frame, 1.2 GB with its rates) but 230 k node intervals: re-reading and re-converting the hour
after every collector cycle cost seconds of CPU and hundreds of MB of transient memory per run.
A view of the new rows only (:func:`ib_view` with ``after``) :func:`merged` into the last one,
then :func:`pruned` to the window, is what a full conversion of the window gives.

What the window keeps (:func:`calibration_spans`): intervals after ``since``, and before it
only the calibration minutes of the jobs still in the window (their ``k`` and ``sigma_R``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.infiniband import counter_resets, in_port_order, port_rates
from hpcscope.analysis.telemetry_rules.common import JobSpan
from hpcscope.analysis.telemetry_rules.residual import NodePoint, node_intervals, series_of

PORT_COLUMNS = ("node", "device", "port")


def _empty() -> pl.DataFrame:
    return pl.DataFrame()


@dataclass(frozen=True)
class IbView:
    """What the RD rules judge of some port rows.

    Attributes:
        intervals: each node's intervals (:func:`~hpcscope.analysis.telemetry_rules.residual.
            node_intervals`, by node and time); :attr:`series` as the rules read them.
        rises: ``port_rates`` rows (ports, ``ts``, ``interval_seconds`` and the watched
            ``<counter>_per_second`` columns) where a watched counter rose (RD-5).
        resets: :func:`~hpcscope.analysis.infiniband.counter_resets` rows (RD-6).
    """

    intervals: pl.DataFrame = field(default_factory=_empty)
    rises: pl.DataFrame = field(default_factory=_empty)
    resets: pl.DataFrame = field(default_factory=_empty)

    @property
    def series(self) -> dict[str, list[NodePoint]]:
        """Node -> its intervals, oldest first (built on each call: the service keeps the
        columns, the rules' objects live for one run)."""
        return series_of(self.intervals)

    @property
    def points(self) -> int:
        """Node intervals held."""
        return self.intervals.height


@dataclass(frozen=True, slots=True)
class CalibrationSpan:
    """Intervals before the window that the rules still need: the calibration minutes of a
    job that started before it, on the job's nodes, ``after < ts <= until``."""

    nodes: tuple[str, ...]
    after: datetime
    until: datetime


def calibration_spans(
    jobs: Iterable[JobSpan],
    *,
    since: datetime,
    calibration_seconds: float,
    slot_seconds: float,
) -> list[CalibrationSpan]:
    """The calibration windows (one scrape slot each side) of the ``jobs`` that started before
    ``since``, cut at ``since`` (what comes after it is in the window anyway)."""
    calibration, slot = timedelta(seconds=calibration_seconds), timedelta(seconds=slot_seconds)
    return [
        CalibrationSpan(
            nodes=tuple(job.nodes),
            after=job.start - slot,
            until=min(job.start + calibration + slot, since),
        )
        for job in jobs
        if job.start is not None and job.start < since and job.nodes
    ]


def ib_view(
    counters: pl.DataFrame,
    *,
    after: datetime | None = None,
    rise_columns: Sequence[str] = (),
    widths_bits: Mapping[str, int] | None = None,
) -> IbView:
    """The view of ``ib_port_counters`` rows, intervals ending after ``after`` only (the rows
    at or before it give the rates of the first ones).

    Args:
        counters: port rows in any order (a row read twice counts once).
        after: keep intervals and resets at ``ts > after`` (None: all).
        rise_columns: the ``<counter>_per_second`` columns RD-5 watches.
        widths_bits: counter widths (narrow legacy counters saturate).
    """
    if counters.height == 0:
        return IbView()
    frame = in_port_order(counters)
    rates = port_rates(frame, widths_bits=widths_bits)
    resets = counter_resets(frame)
    if after is not None:
        rates = rates.filter(pl.col("ts") > after)
        resets = resets.filter(pl.col("ts") > after)
    present = [c for c in rise_columns if c in rates.columns]
    keys = [*PORT_COLUMNS, "ts", "interval_seconds"]
    if present:
        rose = pl.any_horizontal([pl.col(c).fill_null(0) > 0 for c in present])
        rises = rates.filter(rose).select(*keys, *present)
    else:
        rises = rates.head(0).select(*keys)
    return IbView(intervals=node_intervals(rates), rises=rises, resets=resets)


def _concat(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    kept = [f for f in frames if f.width]
    if not kept:
        return pl.DataFrame()
    return pl.concat(kept, how="diagonal_relaxed") if len(kept) > 1 else kept[0]


def _filtered(frame: pl.DataFrame, keep: pl.Expr) -> pl.DataFrame:
    return frame.filter(keep) if frame.height else frame


def merged(
    old: IbView,
    new: IbView,
    *,
    after: datetime,
    until: datetime | None = None,
    nodes: Sequence[str] | None = None,
) -> IbView:
    """``old`` with what it held in ``after < ts <= until`` (until None: to the end) on
    ``nodes`` (None: every node) replaced by ``new``'s (which covers that range)."""
    in_range = pl.col("ts") > after
    if until is not None:
        in_range = in_range & (pl.col("ts") <= until)
    if nodes is not None:
        in_range = in_range & pl.col("node").is_in(list(nodes))

    def frame(before: pl.DataFrame, added: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
        out = _concat([_filtered(before, ~in_range), added])
        return out.sort(order) if out.height else out

    return IbView(
        intervals=frame(old.intervals, new.intervals, ("node", "ts")),
        rises=frame(old.rises, new.rises, (*PORT_COLUMNS, "ts")),
        resets=frame(old.resets, new.resets, (*PORT_COLUMNS, "ts")),
    )


def pruned(view: IbView, *, since: datetime, keep: Sequence[CalibrationSpan] = ()) -> IbView:
    """``view`` without what is at or before ``since``, except inside ``keep``'s spans."""
    kept = pl.col("ts") > since
    for span in keep:
        kept = kept | (
            pl.col("node").is_in(list(span.nodes))
            & (pl.col("ts") > span.after)
            & (pl.col("ts") <= span.until)
        )
    return IbView(
        intervals=_filtered(view.intervals, kept),
        rises=_filtered(view.rises, kept),
        resets=_filtered(view.resets, kept),
    )


__all__ = [
    "CalibrationSpan",
    "IbView",
    "calibration_spans",
    "ib_view",
    "merged",
    "pruned",
]
