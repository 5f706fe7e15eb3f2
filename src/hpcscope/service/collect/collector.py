"""The collector: poll every source once per cycle, append what they return, keep their health.

One collector per server process, on its own thread with its own asyncio loop (the web server
keeps its loop to itself). The collector knows no source by name: it is given
:class:`~hpcscope.service.collect.source.Source` objects (built from a site's settings by the
registry, ``service/sources/``: exporter scrapes, the scheduler, spools, tails) and each cycle

1. polls them in the order given; the sources of one stage (a sequence in the list) are polled
   concurrently (the dcgm-exporter and node-exporter scrapes wait on the network together);
2. appends each poll's batches and records its health row in the source's
   :class:`~hpcscope.service.collect.source.SourceState` (:meth:`Collector.source_states`);
3. lets the sources finish what they left running (:meth:`Source.settle`), unless asked to
   overlap it with the next cycle (:meth:`run` does: a round's GPU rows are stored while the
   next round's scrapes wait for their answers);
4. runs its ``after_cycle`` hooks: the server passes the jobs upkeep (summaries, retention:
   ``service/jobs/retention.py``), the telemetry rules, the SLOs, the notifier and the
   publication of the cycle's writes.

A source that fails costs an error in its health row and the cycle's report; a source that
raises (a bug) is logged and recorded as a failed poll; the other sources are polled as usual
and nothing stored before is touched. Seams keep the collector's tests off the wall clock:
a :class:`Clock` (:class:`SystemClock` by default) and, for the sources, fakes
(:class:`~hpcscope.service.collect.source.FakeSource`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from hpcscope.service.collect.clock import Clock, SystemClock
from hpcscope.service.collect.config import CollectorConfig, CycleReport
from hpcscope.service.collect.source import Health, Poll, Source, SourceState
from hpcscope.service.collect.status import StatusLog, format_status
from hpcscope.service.collect.timing import CYCLE, CycleTimings, hook_phase
from hpcscope.store import Store

log = logging.getLogger(__name__)

__all__ = ["Collector", "CollectorConfig", "CycleReport"]


def stages_of(sources: Sequence[Source | Sequence[Source]]) -> tuple[tuple[Source, ...], ...]:
    """The polling stages of a source list: a source alone, or a sequence polled together."""
    stages = tuple((s,) if isinstance(s, Source) else tuple(s) for s in sources)
    names = [source.name for stage in stages for source in stage]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique: {names}")
    return tuple(stage for stage in stages if stage)


class Collector:
    """Polls its sources, forever, on a background thread.

    Args:
        store: where batches go (through its single writer).
        sources: what to poll, in order; a nested sequence is a stage polled concurrently.
        config: the cycle's interval and the sources' timeout.
        clock: wall and monotonic time, and the wait between cycles (default: the real clock).
        after_cycle: called on a worker thread after each cycle, in order (the server passes the
            jobs capability's upkeep); an exception is logged and collection goes on.
    """

    def __init__(
        self,
        store: Store,
        sources: Sequence[Source | Sequence[Source]],
        *,
        config: CollectorConfig | None = None,
        clock: Clock | None = None,
        after_cycle: Sequence[Callable[[], object]] = (),
    ) -> None:
        self.store = store
        self.config = config if config is not None else CollectorConfig()
        self.stages = stages_of(sources)
        self._after_cycle = tuple((hook_phase(hook), hook) for hook in after_cycle)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._states = {
            source.name: SourceState(source.name) for stage in self.stages for source in stage
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._finished = False
        self.cycles = 0
        self.last_report: CycleReport | None = None
        self.timings = CycleTimings()  # per cycle, poll and hook (/metrics)
        # one INFO line a minute, on the collector's own clock
        self.status_log = StatusLog(store.size_bytes, clock=self._clock.monotonic)

    @property
    def sources(self) -> tuple[Source, ...]:
        """Every source, in polling order."""
        return tuple(source for stage in self.stages for source in stage)

    def source_states(self) -> tuple[SourceState, ...]:
        """Each source's health over time, in polling order (read by the pages)."""
        return tuple(self._states[source.name] for source in self.sources)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Collect on a background thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="hpcscope-collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.scrape_timeout_seconds + 5)

    def _run(self) -> None:
        asyncio.run(self.run())

    async def run(self, *, cycles: int | None = None) -> None:
        """Collect every ``scrape_interval_seconds`` until :meth:`stop` (or ``cycles`` done).

        The thread of :meth:`start` runs this; tests await it with a fake clock.
        """
        clock = self._clock
        interval = self.config.scrape_interval_seconds
        next_tick = clock.monotonic()
        done = 0
        while not self._stop.is_set() and (cycles is None or done < cycles):
            try:
                self.last_report = await self.collect_once(overlap=True)
            except Exception:  # a bug in one cycle must not end collection
                log.exception("collection cycle failed")
            else:
                self._log_cycle(self.last_report)
            self.cycles += 1
            done += 1
            next_tick += interval
            delay = next_tick - clock.monotonic()
            if delay < 0:  # we are late: skip the missed ticks instead of bursting
                next_tick = clock.monotonic()
                delay = 0.0
            await clock.sleep(min(delay, interval))
        await self._settle()
        await self.aclose()

    def _log_cycle(self, report: CycleReport) -> None:
        """Per-cycle detail at DEBUG; the status line at INFO once a minute."""
        log.debug(
            "collector: cycle %d: %d/%d targets ok, %d samples, %d jobs, %d errors %s",
            self.cycles,
            report.ok,
            report.targets,
            report.samples_written,
            report.jobs_written,
            len(report.errors),
            report.errors[:3],
        )
        status = self.status_log.observe(
            targets=report.targets, ok=report.ok, samples=report.samples_written
        )
        if status is not None:
            log.info("%s", format_status(status))

    async def aclose(self) -> None:
        """Release the sources' connections (in the loop that used them)."""
        for source in self.sources:
            try:
                await source.aclose()
            except Exception:  # closing one must not keep the others open
                log.exception("closing source %s failed", source.name)

    def close_open_gaps(self) -> None:
        """At a clean stop: append what each source closes (targets still failing become
        gaps ending now). Once; after :meth:`stop`."""
        if self._finished:
            return
        self._finished = True
        now = self._clock.now()
        for source in self.sources:
            try:
                batches = source.finish(now)
            except Exception:  # one source's bug must not lose the others' rows
                log.exception("finishing source %s failed", source.name)
                continue
            for batch in batches:
                self.store.append(batch.table, batch.rows)

    # ------------------------------------------------------------------ one cycle

    async def _settle(self) -> None:
        """Wait for the work the sources left running (see ``overlap``)."""
        for source in self.sources:
            try:
                await source.settle()
            except Exception:  # a bad round must not end collection
                log.exception("source %s: finishing its last poll failed", source.name)

    async def _poll(self, source: Source, now: datetime) -> Poll:
        started = time.perf_counter()
        try:
            return await source.poll(now)
        except Exception as exc:  # a bug in one source must not stop the others
            log.exception("source %s failed", source.name)
            return Poll(Health(source.name, now, errors=(f"{source.name}: {exc}",)))
        finally:
            self.timings.observe(f"poll:{source.name}", time.perf_counter() - started)

    async def collect_once(self, *, overlap: bool = False) -> CycleReport:
        """Poll every source once, append what they returned, run the after-cycle hooks.

        Args:
            overlap: return before the work the sources left running is done (the GPU rows of
                the round are then stored while the next round's scrapes wait for the HTTP
                answers; the next round waits for them before it stores its own).
                :meth:`run` overlaps; by default everything is stored when this returns.
        """
        started = time.perf_counter()
        now = self._clock.now()
        report = CycleReport(started_at=now)
        for stage in self.stages:
            if len(stage) == 1:
                polls: Sequence[Poll] = [await self._poll(stage[0], now)]
            else:
                polls = await asyncio.gather(*(self._poll(source, now) for source in stage))
            for poll in polls:
                for batch in poll.batches:
                    self.store.append(batch.table, batch.rows)
                self._states[poll.health.source].observe(poll.health)
                report.polls.append(poll.health)
                report.errors.extend(poll.health.errors)
        if not overlap:
            await self._settle()
        for phase, hook in self._after_cycle:
            hook_started = time.perf_counter()
            try:
                await asyncio.to_thread(hook)
            except Exception as exc:  # upkeep must never stop collection
                log.exception("after-cycle hook %r failed", hook)
                report.errors.append(f"after cycle: {exc}")
            self.timings.observe(phase, time.perf_counter() - hook_started)
        self.timings.observe(CYCLE, time.perf_counter() - started)
        return report
