"""The collector: scrape exporters, convert, store; poll the scheduler; record its own health.

One collector per server process, on its own thread with its own asyncio loop (the web server
keeps its loop to itself). Each cycle:

1. re-reads the Prometheus ``file_sd`` targets file when it changed;
2. scrapes every dcgm-exporter and node-exporter target concurrently (timeouts per target);
3. converts dcgm pages into one ``gpu_readings`` row per GPU and time (its jobs decided by the
   platform's allocations, ``service/collect/attribution.py``; ``gpu_samples`` is the view
   with one row per job) and node-exporter pages into InfiniBand port
   counters, and appends them through the store's writer (one write per kind and round);
4. records one ``scrapes`` row per attempt, and a ``collection_gaps`` row when a target comes
   back after failing or after a silence (its own outage: seeded from the store at start), and
   the ``OPS-1`` collection-health alert (``service/collect/health.py``; the gap is data:
   analysis never reads it as an idle GPU);
5. every ``scheduler_poll_seconds``, reads Slurm's jobs (slurmrestd, or squeue/sacct) and
   associations (sacctmgr) into ``jobs``, ``job_allocations`` and ``account_memberships``;
6. reads the Lustre job_stats spool files that changed into ``lustre_job_stats``, one
   ``scrapes`` row per file (``service/collect/lustre_spool.py``);
7. reads the gradient-integrity spool's new lines and raises GI alerts
   (``service/integrity/spool.py``);
8. drains the Falco/Tetragon events into the alert engine (``service/alerts/engine.py``);
9. runs its ``after_cycle`` hooks: the server passes the jobs upkeep (summaries, retention:
   ``service/jobs/retention.py``) and the trace captures (``service/traces/captures.py``).

An exporter that hangs, returns 500 or garbage costs one failed scrape row; the collector keeps
running, and nothing stored before is touched. Seams keep its tests off the wall clock and the
network: a :class:`Clock` (:class:`SystemClock` by default) and the scraper's httpx2 transport.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx2
import pyarrow as pa

from hpcscope.ingest.exporters.dcgm import DcgmConversion, DcgmConverter, readings_table
from hpcscope.ingest.exporters.infiniband import infiniband_rows
from hpcscope.ingest.exporters.node_facts import FactSeries
from hpcscope.ingest.exposition.scrape import Scraper, ScrapeResult, Target, load_file_sd
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.collect.attribution import MappingRoot, ReadingsAttributor
from hpcscope.service.collect.clock import Clock, SystemClock
from hpcscope.service.collect.config import CollectorConfig, CycleReport
from hpcscope.service.collect.health import CollectionHealth
from hpcscope.service.collect.lustre_spool import LustreSpool, scrape_rows
from hpcscope.service.collect.node_facts import fact_series, store_node_facts
from hpcscope.service.collect.scheduler import (
    BoundedPoll,
    SchedulerCollector,
)
from hpcscope.service.collect.status import StatusLog, format_status
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store.infiniband import append_ib_counters
from hpcscope.store.reports import collected_until

log = logging.getLogger(__name__)

__all__ = ["Collector", "CollectorConfig", "CycleReport"]


class Collector:
    """Scrapes, converts and stores, forever, on a background thread.

    Args:
        store: where rows go (through its single writer).
        config: targets, scheduler endpoint, intervals.
        clock: wall and monotonic time, and the wait between cycles (default: the real clock).
        transport: the scraper's httpx2 transport (default: real TCP connections).
        after_cycle: called on a worker thread after each cycle, in order (the server passes the
            jobs capability's upkeep); an exception is logged and collection goes on.
    """

    def __init__(
        self,
        store: Store,
        config: CollectorConfig,
        *,
        clock: Clock | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        after_cycle: Sequence[Callable[[], object]] = (),
    ) -> None:
        self.store = store
        self._after_cycle = tuple(after_cycle)
        self.config = config
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._scraper = Scraper(
            timeout_seconds=config.scrape_timeout_seconds,
            clock=self._aware_now,
            transport=transport,
        )
        self._converters: dict[str, DcgmConverter] = {}
        self._facts: dict[str, FactSeries] = {}
        self._attributor = ReadingsAttributor(store)
        self._targets: list[Target] = list(config.static_targets)
        self._targets_mtime: float | None = None
        # seeded from the store: a restart after an outage records the outage as a gap
        self.health = CollectionHealth(
            silence_seconds=2 * config.scrape_interval_seconds + config.scrape_timeout_seconds,
            collected_until=collected_until(store),
        )
        self._last_scheduler_poll: float | None = None
        self._scheduler = (
            BoundedPoll(
                SchedulerCollector(store, config.scheduler, config.associations),
                wait_seconds=config.scrape_timeout_seconds,
            )
            if config.scheduler is not None
            else None
        )
        self._mapping = (
            MappingRoot(
                store, config.job_mapping_dir, config.job_records_dir, clock=self._epoch_seconds
            )
            if config.job_mapping_dir is not None
            else None
        )
        self._lustre = (
            LustreSpool(
                store, config.lustre_job_stats_dir, jobid_pattern=config.lustre_jobid_pattern
            )
            if config.lustre_job_stats_dir is not None
            else None
        )
        self._integrity = (
            IntegritySpool(store, config.integrity_spool_dir, config.rules)
            if config.integrity_spool_dir is not None
            else None
        )
        self._pending: asyncio.Future[Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cycles = 0
        self.last_report: CycleReport | None = None
        # one INFO line a minute, on the collector's own clock
        self.status_log = StatusLog(store.size_bytes, clock=self._clock.monotonic)

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
        await self._stored()
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

    def _aware_now(self) -> datetime:
        return self._clock.now().replace(tzinfo=UTC)

    def _epoch_seconds(self) -> float:
        return epoch_seconds(self._clock.now())

    async def aclose(self) -> None:
        """Close the scraper's HTTP connections (in the loop that used them)."""
        await self._scraper.aclose()

    # ------------------------------------------------------------------ one cycle

    def targets(self) -> list[Target]:
        """The current target list: static targets plus the file_sd file (re-read on change)."""
        path = self.config.targets_path
        if path is not None:
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                mtime = None
            if mtime is not None and mtime != self._targets_mtime:
                try:
                    loaded = load_file_sd(path)
                except SourceError as exc:
                    log.error("targets file: %s (keeping the previous list)", exc)
                else:
                    self._targets = [*self.config.static_targets, *loaded]
                    self._targets_mtime = mtime
                    log.info("collector: %d targets from %s", len(loaded), path)
        return self._targets

    async def _stored(self) -> None:
        """Wait for the GPU rows of the previous round to be stored (see ``overlap``)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            await pending
        except Exception:  # a bad round must not end collection
            log.exception("storing the GPU rows of a round failed")

    async def collect_once(self, *, overlap: bool = False) -> CycleReport:
        """Scrape every target once, store what came back, poll the scheduler if due.

        Args:
            overlap: return before this round's GPU rows are stored (attributing and appending
                them then overlaps the next round's scrapes, which wait for the HTTP answers;
                the next round waits for them before it stores its own). :meth:`run` overlaps;
                by default the rows are stored when this returns.
        """
        report = CycleReport(started_at=self._clock.now())
        if self._mapping is not None:  # allocations first: the samples below are judged by them
            try:
                await asyncio.to_thread(self._mapping.collect_once)
            except Exception as exc:  # a bad mapping directory must not stop scraping
                log.exception("job mapping collection failed")
                report.errors.append(f"job mapping: {exc}")
        targets = [t for t in self.targets() if t.exporter in self.config.exporters]
        report.targets = len(targets)
        results = await self._scraper.scrape(targets) if targets else []
        scrape_rows: list[dict[str, object]] = []
        gap_rows: list[dict[str, object]] = []
        conversions: list[DcgmConversion] = []
        port_tables: list[pa.Table] = []
        for result in results:
            self._record(result, scrape_rows, gap_rows, conversions, port_tables, report)
        if port_tables:  # one write per round, not one per node (128 commits every cycle)
            append_ib_counters(self.store, pa.concat_tables(port_tables))
        if any(conversion.gpu_rows for conversion in conversions):
            table = readings_table(conversions)  # one table per round, not one per page
            report.samples_written = table.num_rows
            # one row per GPU and time; its job(s) are decided from the platform's
            # allocations, the page's hpc_job labels are only the fallback
            # (service/collect/attribution.py)
            await self._stored()  # one round in flight at most, stored in order
            storing = asyncio.ensure_future(
                asyncio.to_thread(self._attributor.store_readings, table)
            )
            if overlap:
                self._pending = storing
            else:
                await storing
        if scrape_rows:
            self.store.append("scrapes", pa.Table.from_pylist(scrape_rows, schema=SCRAPE_SCHEMA))
        if gap_rows:
            self.store.append("collection_gaps", pa.Table.from_pylist(gap_rows, schema=GAP_SCHEMA))
        now = self._clock.monotonic()
        if self._scheduler is not None:  # a hung controller never holds up the scrapes
            due = not self._scheduler.in_flight and (
                self._last_scheduler_poll is None
                or now - self._last_scheduler_poll >= self.config.scheduler_poll_seconds
            )
            self._last_scheduler_poll = now if due else self._last_scheduler_poll
            if (poll := await self._scheduler.poll(start=due)) is not None:
                report.jobs_written = poll.jobs
                if not poll.ok:
                    report.errors.append(f"scheduler: {poll.error}")
        if self._lustre is not None:
            await self._collect_lustre(self._lustre, report)
        if self._integrity is not None:
            try:
                cycle = await asyncio.to_thread(self._integrity.collect_once)
            except Exception as exc:  # an odd spool must not stop the other sources
                log.exception("integrity spool collection failed")
                report.errors.append(f"integrity spool: {exc}")
            else:
                report.integrity_alerts_written = cycle.alerts
                report.errors.extend(cycle.errors[:20])
        if self.config.security is not None:
            try:
                events = await asyncio.to_thread(self.config.security.collect_once)
            except Exception as exc:  # a bad event stream must not stop the other sources
                log.exception("security event collection failed")
                report.errors.append(f"security events: {exc}")
            else:
                report.security_alerts_written = events.alerts
                report.errors.extend(events.errors)
        for hook in self._after_cycle:
            try:
                await asyncio.to_thread(hook)
            except Exception as exc:  # upkeep must never stop collection
                log.exception("after-cycle hook %r failed", hook)
                report.errors.append(f"after cycle: {exc}")
        return report

    async def _collect_lustre(self, spool: LustreSpool, report: CycleReport) -> None:
        try:
            reads = await asyncio.to_thread(spool.collect_once)
        except Exception as exc:  # a bug or an odd spool must not stop the other sources
            log.exception("lustre spool collection failed")
            report.errors.append(f"lustre spool: {exc}")
            return
        report.targets += len(reads)
        for read in reads:
            report.lustre_rows_written += read.stored
            if read.ok:
                report.ok += 1
            else:
                report.errors.append(read.error or f"{read.path}: failed")
        if reads:
            self.store.append("scrapes", scrape_rows(reads))

    def _record(
        self,
        result: ScrapeResult,
        scrape_rows: list[dict[str, object]],
        gap_rows: list[dict[str, object]],
        conversions: list[DcgmConversion],
        port_tables: list[pa.Table],
        report: CycleReport,
    ) -> None:
        target = result.target
        node = target.labels.get("node")
        row = result.as_row()  # the scrapes row; ok, samples and error are settled below
        ts = row["ts"]
        assert isinstance(ts, datetime)
        samples = 0
        error = result.error
        ok = result.ok
        if result.page is not None and target.exporter == "node":
            try:
                ports = infiniband_rows(result.page, ts=ts, node=node or target.url)
            except SourceError as exc:
                ok, error = False, exc.describe()
            else:
                port_tables.append(ports.table)
                samples = ports.table.num_rows
        elif result.page is not None:
            converter = self._converters.setdefault(target.url, DcgmConverter())
            try:
                conversion = converter.convert(result.page, ts=ts, node=node)
            except SourceError as exc:
                ok, error = False, exc.describe()
            else:
                conversions.append(conversion)
                samples = conversion.gpu_rows
        if ok and result.page is not None:  # Xid counts, posture: service/collect/node_facts
            picker = self._facts.get(target.url)
            if picker is None:
                picker = self._facts[target.url] = fact_series(target.exporter)
            store_node_facts(self.store, target, result.page, ts=ts, picker=picker)
        if ok:
            report.ok += 1
        else:
            report.errors.append(f"{target.url}: {error}")
        gap, alert = self.health.observe(target.url, node, ts, ok=ok, error=error)
        if gap is not None:
            gap_rows.append(gap.row())
        if alert is not None:  # OPS-1 (service/collect/health.py)
            alert_store.upsert_alerts(self.store, [alert])
        log.debug("scrape %s: ok=%s samples=%d error=%s", target.url, ok, samples, error)
        # samples: rows stored (GPU rows or port rows), not page lines
        scrape_rows.append({**row, "ok": ok, "samples": samples, "error": error})

    def close_open_gaps(self) -> None:
        """At shutdown, record targets still failing as gaps ending now."""
        rows = [gap.row() for gap in self.health.close_open(self._clock.now())]
        if rows:
            self.store.append("collection_gaps", pa.Table.from_pylist(rows, schema=GAP_SCHEMA))
