"""Answers of the recording rules kept until an evaluation changes them.

A read of the rules over ``[since, until]`` asks, at ``T = until + D``, for the rules'
evaluations in ``[S, T]`` (``S = T - span``, :class:`~hpcscope.service.backends.rule_reads.
RuleReads`). Its answer is a function of which evaluations lie there, and an evaluation is
written once: two reads whose windows hold the same evaluations get the same answer, whatever
their ``until``. The web app reads a running job's whole life for its page, the job list and the
overview, and the diagram's recent windows, every few seconds; the rules change once a minute.

Which evaluations a window holds is told by two cheap probes of the per-GPU rule that every GPU
the engine scraped has (``observed_seconds``), for the read's jobs: the newest evaluation at or
before ``T`` (``newest``) and the newest before ``S`` (``before``). Two windows with the same
pair hold the same evaluations: those after ``before`` up to ``newest`` (none lies between
``before`` and ``S``, or ``before`` would be newer). When there is no ``before`` within the
engine's lookback (which is at least one evaluation interval), the two windows must also start
within one interval of each other. A read of the first and last evaluation times (a subquery at
the window's step) also depends on the subquery's first and last step, which are part of the
key.

An answer is kept only when the evaluations it read could not change while it was read: its
newest evaluation ``E`` was settled, :data:`SETTLED_SECONDS` or the rules' delay (the site's
ingestion delay) old by the clock, when the read started (an engine writes a group's rules one
after the other, vmalert writes them back through remote write: a probe could see ``E`` of one
rule before another's is stored), and the read ended :data:`CLOCK_SKEW_SECONDS` before the
group's next evaluation could be written (``E`` plus the evaluation interval: an evaluation is
never made before its own time). Any other answer is kept ``fresh_seconds`` (the scrape
interval) by the clock from when its read started, no longer: the live pages read the same
windows several times a scrape interval, and a page is as old as one scrape interval anyway
(the web app keeps a page per collector cycle); an evaluation written meanwhile changes the
probe's answer, hence the key, so only a group written halfway when it was read shows for that
long. An engine whose ``timestamp()`` is the query time rather than the sample's (so no two
reads share a key) is read every time.

The probes' answers are kept too (:class:`ProbeAnswers`), while they cannot change: the newest
evaluation ``E``, asked at a time after the probe was made (so it saw every evaluation
written), stays the newest until the group's next evaluation is due, ``E`` plus the interval
less :data:`CLOCK_SKEW_SECONDS` (a group's evaluations are at least its interval apart), for
any window ending at or after ``E``; the newest evaluation at or before a start ``S`` never
changes once every evaluation up to ``S`` is stored (settled after ``S``). A running job's page
read within a minute of another asks the engine nothing; a sliding window (the diagram's last
five minutes) asks one probe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

#: Answers kept (a 1024-GPU read of every column is about 250 kB).
MAX_ANSWERS = 16
#: How old (seconds) a newest evaluation must be for its answer to be kept, at least.
SETTLED_SECONDS = 15.0
#: How far the engine's clock may be ahead of hpcscope's.
CLOCK_SKEW_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Window:
    """What decides a read's answer besides its query: the evaluations it holds (``before``:
    the newest at or before its start ``start``, ``newest``: at or before its end; epoch
    seconds, None when the probe found none) and, for the subqueries, their steps
    (``steps``, else None)."""

    before: float | None
    newest: float | None
    start: float
    steps: tuple[float, float] | None = None

    @property
    def held(self) -> Hashable:
        """The evaluations held, as a key: an evaluation at the start itself is in the
        window on Prometheus 2 (both ends closed) and not on VictoriaMetrics, so
        ``before == start`` is a key of its own."""
        return (self.before, self.before == self.start, self.newest, self.steps)


@dataclass(frozen=True, slots=True)
class _Newest:
    value: float
    asked_at: float
    answered_by: float


class ProbeAnswers:
    """What the probes of :class:`Window` answered, kept while it cannot change (the module
    docstring). Times are epoch seconds; ``interval_seconds``: the rules' evaluation interval."""

    def __init__(
        self,
        *,
        interval_seconds: float,
        settled_seconds: float = SETTLED_SECONDS,
        max_answers: int = 4 * MAX_ANSWERS,
    ) -> None:
        self.interval_seconds = interval_seconds
        self.settled_seconds = settled_seconds
        self.max_answers = max_answers
        self._newest: OrderedDict[str, _Newest] = OrderedDict()
        self._before: OrderedDict[tuple[str, float], float | None] = OrderedDict()
        self._lock = threading.Lock()

    def newest(self, selector: str, end: float, *, now: float) -> float | None:
        """The newest evaluation at or before ``end`` when it is known, else None."""
        with self._lock:
            kept = self._newest.get(selector)
        if kept is None or kept.asked_at < kept.answered_by or end < kept.value:
            return None
        if now >= kept.value + self.interval_seconds - CLOCK_SKEW_SECONDS:
            return None  # the next evaluation may be written
        return kept.value

    def keep_newest(
        self, selector: str, value: float | None, *, asked_at: float, answered_by: float
    ) -> None:
        """Keep a probe's answer: the newest evaluation at or before ``asked_at``, answered by
        the clock's ``answered_by``."""
        if value is None:
            return
        with self._lock:
            self._newest[selector] = _Newest(value, asked_at, answered_by)
            self._trim(self._newest)

    def before(self, selector: str, start: float) -> tuple[bool, float | None]:
        """(known, the newest evaluation at or before ``start``)."""
        with self._lock:
            if (selector, start) in self._before:
                return True, self._before[(selector, start)]
        return False, None

    def keep_before(
        self, selector: str, start: float, value: float | None, *, asked: float
    ) -> None:
        """Keep a probe's answer at ``start``, asked by the clock's ``asked``: final when every
        evaluation up to ``start`` was written."""
        if asked - start < self.settled_seconds:
            return
        with self._lock:
            self._before[(selector, start)] = value
            self._trim(self._before)

    def _trim(self, kept: OrderedDict[Any, Any]) -> None:
        while len(kept) > self.max_answers:
            kept.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Kept:
    start: float
    table: pa.Table
    until: float | None = None  # by the clock: kept only so long (None: while it is held)


class RuleAnswers:
    """A small LRU of rule reads' tables keyed by their query and :class:`Window`."""

    def __init__(
        self,
        *,
        settled_seconds: float = SETTLED_SECONDS,
        fresh_seconds: float = 0.0,
        max_answers: int = MAX_ANSWERS,
    ) -> None:
        self.settled_seconds = settled_seconds
        self.fresh_seconds = fresh_seconds
        self.max_answers = max_answers
        self._kept: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(query: Hashable, window: Window) -> Hashable:
        return (query, window.held)

    def get(
        self,
        query: Hashable,
        window: Window,
        *,
        interval_seconds: float,
        now: float | None = None,
    ) -> pa.Table | None:
        """The kept table of an equal read, None when there is none (``now``: the clock, for
        the answers kept for a while only; None: those are not found)."""
        if window.newest is None:
            return None
        with self._lock:
            kept = self._kept.get(self._key(query, window))
            if kept is not None and kept.until is not None and (now is None or now >= kept.until):
                kept = None
            if kept is not None and (
                window.before is not None or abs(kept.start - window.start) < interval_seconds
            ):
                self._kept.move_to_end(self._key(query, window))
                self.hits += 1
                return kept.table
            self.misses += 1
            return None

    def read(
        self,
        query: Hashable,
        window: Window,
        compute: Callable[[], pa.Table],
        *,
        clock: Callable[[], float],
        interval_seconds: float,
    ) -> pa.Table:
        """The kept answer of ``query`` over ``window``, else ``compute()``, kept when no
        evaluation could be written while it ran (the module docstring; ``clock``: epoch
        seconds, ``interval_seconds``: the rules' evaluation interval)."""
        started = clock()
        found = self.get(query, window, interval_seconds=interval_seconds, now=started)
        if found is not None:
            return found
        table = compute()
        newest = window.newest
        if newest is None:
            return table
        until: float | None = started + self.fresh_seconds
        if (
            started - newest >= self.settled_seconds
            and clock() <= newest + interval_seconds - CLOCK_SKEW_SECONDS
        ):
            until = None
        elif self.fresh_seconds <= 0:
            return table
        with self._lock:
            self._kept[self._key(query, window)] = _Kept(window.start, table, until)
            self._kept.move_to_end(self._key(query, window))
            while len(self._kept) > self.max_answers:
                self._kept.popitem(last=False)
        return table

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
