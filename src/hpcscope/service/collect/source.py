"""The one seam every collector input goes through: a :class:`Source` polled once per cycle.

A source is anything the collector reads: an exporter scrape, the scheduler, a spool of
files, a tailed log. Each implements one method, :meth:`Source.poll`, which reads what is new
and answers a :class:`Poll`: the rows to append (:class:`Batch`, one per table) and the
poll's :class:`Health` row (what it read, what failed). The collector
(``service/collect/collector.py``) holds no code of its own for any source: it polls the
sources it is given, in order, appends their batches, and keeps each one's
:class:`SourceState` (when it last polled, last collected something, last failed), which the
pages read to say how collection is doing. Like httpx's transport (one method,
``handle_request``) and prometheus_client's ``Collector`` (one method, ``collect``), the
protocol is small on purpose; :class:`FakeSource` is the fake the tests use, as httpx's
``MockTransport``::

    def handler(now: datetime) -> Poll:
        return Poll(Health("fake", now, targets=1, ok=1))

    collector = Collector(store, [FakeSource("fake", handler)])

Which sources exist, their settings sections and how they are built from a site's settings
is the registry's business (``service/sources/``, ``docs/development.md``, "A new source").

Contract of :meth:`Source.poll`:

- it never raises for bad input (a target down, a malformed file): that is an error string in
  the health row, and the other sources are polled as usual (a raise is a bug: the collector
  logs it and records a failed poll);
- blocking work (files, subprocesses, the store's write futures) runs off the event loop
  (:func:`in_thread`); a source that waits on the network awaits it;
- a source that writes through a store function of its own (merges, upserts, deduplicated
  appends) does so during the poll; plain appends are returned as batches, and the collector
  appends them after the poll;
- a source that leaves work running past the poll (the GPU rows of a round stored while the
  next round's scrapes wait on the network) finishes it in :meth:`Source.settle`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol, TypeVar, runtime_checkable

import pyarrow as pa

__all__ = [
    "Batch",
    "FakeSource",
    "Health",
    "Poll",
    "Source",
    "SourceState",
    "ThreadedSource",
    "in_thread",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows for one table of the store, appended by the collector after the poll."""

    table: str
    rows: pa.Table


@dataclass(frozen=True, slots=True)
class Health:
    """The health row of one poll of one source.

    Attributes:
        source: the source's name.
        ts: when the poll started (the collector's clock).
        polled: False when the source was not due and read nothing (its own cadence: the
            scheduler every ``poll_seconds``); the other figures are then zero.
        targets: things it tried to read (exporter targets, spool files); 0 for a source
            with a single input that reports it through ``errors`` only.
        ok: of the targets, those read well.
        rows: rows it stored or returned as batches, all tables together.
        samples: GPU samples among ``rows`` (the status line's samples per second).
        jobs: scheduler jobs among ``rows``.
        alerts: alerts it wrote (new or merged).
        errors: what went wrong, each naming its source and position (``file:line: ...``).
    """

    source: str
    ts: datetime
    polled: bool = True
    targets: int = 0
    ok: int = 0
    rows: int = 0
    samples: int = 0
    jobs: int = 0
    alerts: int = 0
    errors: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether anything of this poll failed (a target, a line, the whole read)."""
        return bool(self.errors) or self.ok < self.targets


@dataclass(frozen=True, slots=True)
class Poll:
    """What one :meth:`Source.poll` answers: the rows to append and its health row."""

    health: Health
    batches: tuple[Batch, ...] = ()


@runtime_checkable
class Source(Protocol):
    """A collector input: polled once per collector cycle (module docstring).

    Attributes:
        name: unique among the sources (``dcgm``, ``lustre_job_stats``); its settings
            section has the same name.
    """

    name: str

    async def poll(self, now: datetime) -> Poll:
        """Read what is new since the last poll; store it or return it as batches."""
        ...

    async def settle(self) -> None:
        """Wait for work the last poll left running (rows still being stored)."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (connections), in the loop that polled it."""
        ...

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        """At a clean stop: the rows that close what is still open (a target still failing
        is a gap ending ``now``). Called once, after the last poll, from any thread."""
        ...


async def in_thread(work: Callable[[], T]) -> T:
    """Run blocking work (file reads, subprocesses, the store's futures) off the loop."""
    return await asyncio.to_thread(work)


class ThreadedSource:
    """Base of a source whose poll is blocking work (files, subprocesses, the store's write
    futures): implement :meth:`read`; it runs on a worker thread. Nothing to settle, close or
    finish unless overridden."""

    name = ""

    def read(self, now: datetime) -> Poll:
        """Read what is new since the last poll (on a worker thread)."""
        raise NotImplementedError

    async def poll(self, now: datetime) -> Poll:
        return await asyncio.to_thread(self.read, now)

    async def settle(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        return ()


@dataclass
class SourceState:
    """One source's health over time, as the collector keeps it (the pages read this).

    Attributes:
        name: the source.
        polls: polls so far (not counting the ones it was not due for).
        last_poll_ts: when it last read anything.
        last_collected_ts: when it last stored or returned rows (``rows > 0``).
        last_ok_ts: when a poll last went without any failure.
        last_error_ts / last_error: the last failure and its first message.
        rows: rows collected since the collector started.
        last: the last poll's health row (None before the first).
    """

    name: str
    polls: int = 0
    last_poll_ts: datetime | None = None
    last_collected_ts: datetime | None = None
    last_ok_ts: datetime | None = None
    last_error_ts: datetime | None = None
    last_error: str | None = None
    rows: int = 0
    last: Health | None = None

    def observe(self, health: Health) -> None:
        """Count one poll's health row."""
        if not health.polled:
            return
        self.polls += 1
        self.last = health
        self.last_poll_ts = health.ts
        self.rows += health.rows
        if health.rows:
            self.last_collected_ts = health.ts
        if health.failed:
            self.last_error_ts = health.ts
            self.last_error = health.errors[0] if health.errors else "a target failed"
        else:
            self.last_ok_ts = health.ts


@dataclass
class FakeSource:
    """A source whose polls a function answers: the fake for tests (httpx's ``MockTransport``).

    Args:
        name: the source's name.
        handler: called with each poll's time; answers the :class:`Poll`. Raising in it
            stands for a bug in a source.
        finish_batches: what :meth:`finish` returns.
    """

    name: str
    handler: Callable[[datetime], Poll | Awaitable[Poll]]
    finish_batches: Sequence[Batch] = ()
    polled_at: list[datetime] = field(default_factory=list)
    settled: int = 0
    closed: bool = False

    async def poll(self, now: datetime) -> Poll:
        self.polled_at.append(now)
        answer = self.handler(now)
        poll = await answer if isinstance(answer, Awaitable) else answer
        if poll.health.source != self.name:  # the handler may not know the name
            poll = replace(poll, health=replace(poll.health, source=self.name))
        return poll

    async def settle(self) -> None:
        self.settled += 1

    async def aclose(self) -> None:
        self.closed = True

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        return tuple(self.finish_batches)
