"""The InfiniBand window of the telemetry rules, kept between runs (issue 17's soak).

Each run of :class:`~hpcscope.service.telemetry_rules.engine.TelemetryRules` judges RD-2b's
hour of ``ib_port_counters``. Read whole every 15 s at 128 nodes, that hour was 1.8 M rows
through DuckDB, Arrow and Polars: 3.7 to 5.1 s of CPU and up to 220 MB of transient memory
per run, growing as the hour filled. :class:`IbWindow` reads the rows since its last run
only, turns them into the rules' form (:func:`~hpcscope.analysis.telemetry_rules.ib_view.
ib_view`) and merges them into the view it holds, pruned to the window
(:func:`~hpcscope.analysis.telemetry_rules.ib_view.pruned`).

How a run stays equal to a whole read:

* the last row of each port at or before the cut is kept (``tail``), so the first new
  interval of every port has its rate, however long the port was silent;
* the last ``late_seconds`` are read again each run and their intervals replaced, for rows the
  collector stores after a run that read their time;
* the rows read are counted by scrape slot; a run first asks the store the same counts
  (one ``GROUP BY`` over the window) and rebuilds the whole view when they differ: rows
  stored behind the cut (a backfill, an ``hpcscope ingest`` of old counters) or removed;
* the calibration minutes of a job that started before what the view holds are read once;
* a clock that went back, or a gap longer than the window, rebuilds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa

from hpcscope.analysis.telemetry_rules.ib_view import (
    PORT_COLUMNS,
    CalibrationSpan,
    IbView,
    ib_view,
    merged,
    pruned,
)
from hpcscope.model.timeutil import epoch_seconds, from_epoch_seconds
from hpcscope.store import Store
from hpcscope.store.infiniband import ib_counters, ib_rows_per_slot

log = logging.getLogger(__name__)


def frame_of(table: pa.Table) -> pl.DataFrame:
    """A store read as a Polars frame (what the telemetry rules take)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


class IbWindow:
    """The rules' InfiniBand view of the store, advanced run to run (module docstring).

    Args:
        rise_columns: the rate columns RD-5 watches
            (:func:`~hpcscope.analysis.telemetry_rules.port_events.rd5_columns`).
        slot_seconds: the scrape slot (RD-2's ``bucket_seconds``): rows are counted by it.
        late_seconds: how far back each run reads again (rows stored late).
        overlap_seconds: how far before a window a whole read starts (the first interval's
            rate needs the row before it).
    """

    def __init__(
        self,
        *,
        rise_columns: Sequence[str] = (),
        slot_seconds: float = 15.0,
        late_seconds: float = 30.0,
        overlap_seconds: float = 30.0,
    ) -> None:
        self.rise_columns = tuple(rise_columns)
        self.slot_seconds = slot_seconds
        self.late = timedelta(seconds=late_seconds)
        self.overlap = timedelta(seconds=overlap_seconds)
        self._view: IbView | None = None
        self._tail = pl.DataFrame()
        self._cut: datetime | None = None  # rows at or before it are in the view for good
        self._until: datetime | None = None  # the last run's time
        self._covered: datetime | None = None  # the view has every interval after it
        self._spans: set[tuple[tuple[str, ...], datetime]] = set()
        self._counts: dict[int, int] = {}
        #: Port rows read by the last run, and whether it rebuilt the view.
        self.rows_read = 0
        self.rebuilt = False

    def view(
        self,
        store: Store,
        *,
        since: datetime,
        now: datetime,
        spans: Sequence[CalibrationSpan] = (),
    ) -> IbView:
        """The view of the intervals after ``since`` up to ``now``, and of ``spans``."""
        cut, until = self._cut, self._until
        fresh = (
            self._view is None
            or cut is None
            or until is None
            or now < until
            or since - self.overlap > cut
            or self._behind(store, since, cut)
        )
        if fresh:
            self._rebuild(store, since, now)
        else:
            assert cut is not None and self._view is not None
            rows = frame_of(ib_counters(store, since=cut, until=now))
            self.rows_read = rows.height
            self.rebuilt = False
            frame = pl.concat([self._tail, rows], how="diagonal_relaxed") if self._tail.width \
                else rows  # fmt: skip
            self._view = merged(self._view, self._view_of(frame, after=cut), after=cut)
            self._advance(frame, since=since, now=now, after=cut)
        assert self._view is not None
        self._read_spans(store, spans)
        self._view = pruned(self._view, since=since, keep=spans)
        start = epoch_seconds(since)
        self._counts = {
            s: n for s, n in self._counts.items() if (s + 1) * self.slot_seconds > start
        }
        return self._view

    def _view_of(self, frame: pl.DataFrame, *, after: datetime) -> IbView:
        return ib_view(frame, after=after, rise_columns=self.rise_columns)

    def _rebuild(self, store: Store, since: datetime, now: datetime) -> None:
        frame = frame_of(ib_counters(store, since=since - self.overlap, until=now))
        self.rows_read = frame.height
        self.rebuilt = True
        self._view = self._view_of(frame, after=since)
        self._covered = since
        self._spans = set()
        self._counts = {}
        self._tail = pl.DataFrame()
        self._advance(frame, since=since, now=now, after=since)

    def _advance(self, frame: pl.DataFrame, *, since: datetime, now: datetime,
                 after: datetime) -> None:  # fmt: skip
        """Move the cut from ``after`` (the last one, or the window's start after a whole
        read) to ``now - late``: count the rows that became final, keep each port's last row
        at or before the new cut."""
        old_cut = after
        cut = max(old_cut, now - self.late)
        if frame.height:
            final = frame.filter((pl.col("ts") > old_cut) & (pl.col("ts") <= cut))
            slots = (pl.col("ts").dt.epoch("us") / (self.slot_seconds * 1e6)).floor()
            for slot, n in final.group_by(slots.cast(pl.Int64).alias("slot")).len().iter_rows():
                self._counts[int(slot)] = self._counts.get(int(slot), 0) + int(n)
            last = frame.filter(pl.col("ts") <= cut).unique(
                subset=list(PORT_COLUMNS), keep="last", maintain_order=True
            )
            # a port silent for longer than the window starts again as after a whole read
            self._tail = last.filter(pl.col("ts") >= since - self.overlap)
        self._cut, self._until = cut, now

    def _behind(self, store: Store, since: datetime, cut: datetime) -> bool:
        """Whether the store's row counts in the whole slots between ``since`` and the cut
        differ from what the view read (module docstring)."""
        first = int(epoch_seconds(since) // self.slot_seconds) + 1
        last = int(epoch_seconds(cut) // self.slot_seconds) - 1  # the slot of the cut may fill yet
        if last < first:
            return False
        stored = ib_rows_per_slot(
            store,
            after=from_epoch_seconds(first * self.slot_seconds) - timedelta(microseconds=1),
            before=from_epoch_seconds((last + 1) * self.slot_seconds),
            slot_seconds=self.slot_seconds,
        )
        mine = {s: n for s, n in self._counts.items() if first <= s <= last}
        if stored != mine:
            moved = sum(stored.values()) - sum(mine.values())
            log.info("telemetry rules: %+d InfiniBand rows behind the window's cut; re-reading "
                     "the window", moved)  # fmt: skip
            return True
        return False

    def _read_spans(self, store: Store, spans: Sequence[CalibrationSpan]) -> None:
        """Read the calibration minutes the view does not hold yet."""
        assert self._view is not None and self._covered is not None
        for span in spans:
            key = (span.nodes, span.after)
            if span.after >= self._covered or key in self._spans:
                continue
            table = ib_counters(
                store, nodes=list(span.nodes), since=span.after - self.overlap, until=span.until
            )
            frame = frame_of(table)
            self.rows_read += frame.height
            self._view = merged(
                self._view,
                self._view_of(frame, after=span.after),
                after=span.after,
                until=span.until,
                nodes=span.nodes,
            )
            self._spans.add(key)
