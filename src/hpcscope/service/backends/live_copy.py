"""The newest samples of every GPU, read from the engine once per scrape interval.

The overview and the diagram both draw each GPU's newest sample, and each asks for it as of
its own instant: one instant query per value shown and one of their times, 14 answers of 1,024
series at 128 nodes, about 0.2 s of engine CPU per page on two cores. A GPU's newest sample
changes once per scrape interval, so :class:`NewestCopy` keeps what one read answered as of its
instant ``C`` and answers every read as of an instant in ``[C, C + interval)`` from it, while
the copy is younger than one interval by the clock: the pages built meanwhile show the newest
samples as of ``C``, at most one scrape interval before their own instant (their ages are still
counted to their own instant). A read as of an instant outside that range (a past instant, the
next interval) reads the engine again and becomes the copy. Reads are one at a time: pages
asking at once wait for the one read and share it.

The copy holds every GPU the engine answers (its 5-minute lookback); a read's ``since`` keeps
the rows sampled at or after it, and its ``columns`` the columns it asked (the others null),
as a read of the engine would answer them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

#: What a read of the engine answers: the newest samples as of ``until`` of ``columns`` (None:
#: every column), every GPU within the engine's lookback.
NewestRead = Callable[[datetime, Sequence[str] | None], pa.Table]


@dataclass(frozen=True, slots=True)
class _Copy:
    instant: datetime
    made: float
    columns: frozenset[str] | None
    table: pa.Table


class NewestCopy:
    """The newest samples kept for one scrape interval (the module docstring).

    Args:
        read: reads the engine (:data:`NewestRead`).
        interval_seconds: the scrape interval.
        clock: epoch seconds now (tests pass a fixed one).
    """

    def __init__(
        self, read: NewestRead, *, interval_seconds: float, clock: Callable[[], float]
    ) -> None:
        self._read = read
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._copy: _Copy | None = None
        self._lock = threading.Lock()
        self.reads = 0

    @property
    def instant(self) -> datetime | None:
        """The instant the kept copy is of (None: none kept)."""
        copy = self._copy
        return None if copy is None else copy.instant

    def _serves(self, copy: _Copy | None, until: datetime, wanted: frozenset[str] | None) -> bool:
        if copy is None or self._clock() - copy.made >= self.interval_seconds:
            return False
        if not 0 <= (until - copy.instant).total_seconds() < self.interval_seconds:
            return False
        return copy.columns is None or (wanted is not None and wanted <= copy.columns)

    def latest(
        self, *, since: datetime, until: datetime, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The newest sample of every GPU sampled at or after ``since``, as of ``until`` (or
        of the copy's instant, up to one interval before it)."""
        wanted = frozenset(columns) if columns is not None else None
        with self._lock:
            copy = self._copy
            if not self._serves(copy, until, wanted):
                made = self._clock()
                table = self._read(until, columns)
                copy = self._copy = _Copy(until, made, wanted, table)
                self.reads += 1
        assert copy is not None
        return _answer(copy, since=since, wanted=wanted)


def _answer(copy: _Copy, *, since: datetime, wanted: frozenset[str] | None) -> pa.Table:
    """The copy's rows sampled at or after ``since``, the columns not ``wanted`` null."""
    table = copy.table
    fresh = pc.greater_equal(table["ts"], pa.scalar(since, type=table.schema.field("ts").type))
    table = table.filter(fresh)
    if wanted is None or copy.columns == wanted:
        return table
    keys = {"ts", "node", "gpu", "gpu_instance_id", "job_id"}
    # a row is a GPU with a value of an asked column, as the engine answers the asked ones
    asked = [table[name].is_valid() for name in table.column_names if name in wanted - keys]
    if asked:
        any_asked = asked[0]
        for valid in asked[1:]:
            any_asked = pc.or_(any_asked, valid)
        table = table.filter(any_asked)
    for index, field in enumerate(table.schema):
        if field.name not in keys and field.name not in wanted:
            table = table.set_column(index, field, pa.nulls(table.num_rows, field.type))
    return table
