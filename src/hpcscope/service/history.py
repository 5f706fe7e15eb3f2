"""The demo's past: a month of a cluster read into the store by the collector's own code.

:func:`write_history` takes chunks of what the collectors would have read (:class:`PastChunk`:
the demo passes :func:`hpcscope.twin.history.simulate_history`'s) and, chunk by chunk, in time
order, does what collection does with them:

1. slurmrestd's job list -> :func:`~hpcscope.ingest.slurm.parse_slurmrestd_jobs` ->
   :func:`~hpcscope.service.collect.scheduler.apply_snapshot` (jobs, allocations, ends);
2. every dcgm-exporter page -> the exposition parser (one per node, as per target) ->
   :class:`~hpcscope.ingest.exporters.dcgm.DcgmConverter` ->
   :func:`~hpcscope.ingest.exporters.dcgm.readings_table` -> attribution to the jobs by their
   allocations and append (:func:`~hpcscope.service.collect.attribution.store_dcgm_readings`);
3. the incident's Falco and Tetragon lines -> the files the alert engine tails (Tetragon's jobs
   from the ``/proc/<pid>/cgroup`` tree written beside them) ->
   :meth:`~hpcscope.service.alerts.engine.SecurityCollection.collect_once` at the chunk's end;
4. the kept summaries of the jobs that ended (the upkeep's
   :func:`~hpcscope.service.jobs.summaries.summarise_finished_jobs`, at the history's scrape
   interval, so that each sample stands for one grid step);
5. ``after_chunk`` at the chunk's end: the demo runs its notifier there, on the history's
   clock (the jobs that failed on an Xid notified, every outcome audited).

Then the alerts of jobs older than :data:`HANDLED_AFTER_DAYS` are acknowledged or resolved by
the admin, as a security team works through its queue (a node's alerts stay open: a firing
again grows them, where a resolved alert would stay resolved). Last, the finished jobs' charts
are stored (the document keeper's passes, :func:`~hpcscope.service.jobs.documents.store_timeseries`)
before collection starts, so that no request computes one. No row is made by hand: what
the pages show at first open (chargeback and its trend, the SLOs with their history and burn
rates, the job list, the alerts) comes out of the same parsers, merges and analyses as live
collection.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from hpcscope.ingest.exporters.dcgm import DcgmConverter, readings_table
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.ingest.slurm import parse_slurmrestd_jobs
from hpcscope.model.access import system_principal
from hpcscope.model.alerts import AlertState
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.collect.attribution import store_dcgm_readings
from hpcscope.service.collect.scheduler import apply_snapshot
from hpcscope.service.core import Service
from hpcscope.service.jobs.documents import store_timeseries
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.tetragon_policy import protected_roots

log = logging.getLogger(__name__)

#: Alerts last seen more than this many days before the end are handled by the admin.
HANDLED_AFTER_DAYS = 4.0


class PastChunk(Protocol):
    """What the collectors would have read over ``[start, end)`` (epoch seconds)."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def pages(self) -> Sequence[tuple[float, str, str]]:
        """``(ts, node, page)``: each node's dcgm-exporter page at each scrape."""
        ...

    @property
    def slurmrestd(self) -> bytes:
        """slurmrestd's ``/jobs`` body at ``end``: the jobs pending, running or ended."""
        ...

    @property
    def falco(self) -> Sequence[str]: ...
    @property
    def tetragon(self) -> Sequence[str]: ...
    @property
    def cgroups(self) -> Mapping[int, str]:
        """pid -> ``/proc/<pid>/cgroup`` of the Tetragon lines' processes."""
        ...

    @property
    def incident_name(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class HistoryReport:
    """What :func:`write_history` wrote, and how long it took."""

    jobs: int
    samples: int
    summaries: int
    alerts: int
    incidents: tuple[str, ...]
    seconds: float
    stopped: bool = False
    """The server stopped while it was written: the days after the last chunk are missing."""


class _Reader:
    """The collector's parsers and converters, one per node, over the month's pages."""

    def __init__(self, service: Service, work_dir: Path) -> None:
        self.service = service
        self.parsers: dict[str, ExpositionParser] = {}
        self.converters: dict[str, DcgmConverter] = {}
        self.falco = work_dir / "falco" / "events.json"
        self.tetragon = work_dir / "tetragon" / "events.json"
        self.proc = work_dir / "proc"
        for path in (self.falco, self.tetragon):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        self.security = SecurityCollection(
            service.store,
            SecurityEventBuffer(max_rows=service.settings.security_events.buffer_rows),
            service.rules,
            checkpoint_roots=[service.topology.checkpoint_root],
            protected_roots=protected_roots(service.topology),
            falco_path=self.falco,
            tetragon_path=self.tetragon,
            proc_root=self.proc,
        )
        self.jobs: set[str] = set()
        self.samples = 0
        self.alerts = 0

    def read(self, chunk: PastChunk) -> None:
        store = self.service.store
        snapshot = parse_slurmrestd_jobs(chunk.slurmrestd, source="slurmrestd (history)")
        apply_snapshot(store, snapshot)
        self.jobs.update(str(j) for j in snapshot.jobs.column("job_id").to_pylist())
        conversions = []
        for ts, node, page in chunk.pages:
            parser = self.parsers.setdefault(node, ExpositionParser())
            converter = self.converters.setdefault(node, DcgmConverter())
            parsed = parser.parse(page, source=f"dcgm-exporter {node} (history)")
            conversions.append(converter.convert(parsed, ts=from_epoch_seconds(ts), node=node))
        if conversions:
            table = readings_table(conversions)
            store_dcgm_readings(store, table)
            self.samples += table.num_rows
        if chunk.incident_name is not None:
            self._incident(chunk)

    def _incident(self, chunk: PastChunk) -> None:
        shutil.rmtree(self.proc, ignore_errors=True)  # one incident's processes at a time
        for pid, text in chunk.cgroups.items():
            (self.proc / str(pid)).mkdir(parents=True, exist_ok=True)
            (self.proc / str(pid) / "cgroup").write_text(text + "\n", encoding="utf-8")
        for path, lines in ((self.falco, chunk.falco), (self.tetragon, chunk.tetragon)):
            with path.open("a", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in lines))
        cycle = self.security.collect_once(now=from_epoch_seconds(chunk.end))
        self.alerts += cycle.alerts
        for error in cycle.errors:
            log.warning("history: %s", error)


def _store_charts(service: Service, stopped: Callable[[], bool] | None) -> None:
    """The finished jobs' charts, stored before anyone reads them (the document keeper's
    work, done before collection starts: under load a month of them took the keeper minutes,
    and every chart it had not stored yet cost the request that asked for it)."""
    interval, metrics = service.settings.scrape_interval_seconds, service.gpu_samples()
    while not (stopped is not None and stopped()):
        if not store_timeseries(service.store, scrape_interval_seconds=interval, metrics=metrics):
            return


def write_history(
    service: Service,
    chunks: Iterable[PastChunk],
    work_dir: Path,
    *,
    end: datetime,
    step_seconds: float,
    after_chunk: Callable[[datetime], object] | None = None,
    stopped: Callable[[], bool] | None = None,
) -> HistoryReport:
    """Read ``chunks`` into ``service``'s store, as collection would have (module docstring).

    Args:
        chunks: in time order.
        work_dir: scratch space (the event files and ``/proc`` tree the alert engine reads);
            emptied first.
        end: the end of the history (UTC, naive): the demo's start.
        step_seconds: the history's scrape interval (one page per node per step).
        after_chunk: called with each chunk's end once it is read (the demo's notifier).
        stopped: asked after each chunk (a day): when it holds, nothing more is read (a demo
            stopped while its history is written stops within a chunk, not at its end).
    """
    started = time.perf_counter()
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    reader = _Reader(service, work_dir)
    incidents: list[str] = []
    summaries, halted = 0, False
    for chunk in chunks:
        if stopped is not None and stopped():
            halted = True
            break
        reader.read(chunk)
        if chunk.incident_name is not None:
            incidents.append(chunk.incident_name)
        summaries += summarise_finished_jobs(
            service.store,
            now=from_epoch_seconds(chunk.end),
            scrape_interval_seconds=step_seconds,
            max_jobs=100_000,
        )
        if after_chunk is not None:
            after_chunk(from_epoch_seconds(chunk.end))
    if not halted:
        # the jobs that ended last: summarised at the history's interval, not the live one's
        summaries += summarise_finished_jobs(
            service.store, now=end, scrape_interval_seconds=step_seconds, max_jobs=100_000
        )
        _handle_old_alerts(service, end=end)
        _store_charts(service, stopped)
    report = HistoryReport(
        jobs=len(reader.jobs),
        samples=reader.samples,
        summaries=summaries,
        alerts=reader.alerts,
        incidents=tuple(incidents),
        seconds=time.perf_counter() - started,
        stopped=halted,
    )
    log.info(
        "history: %d jobs, %d GPU samples, %d summaries, %d alerts in %.1f s",
        report.jobs,
        report.samples,
        report.summaries,
        report.alerts,
        report.seconds,
    )
    return report


def _handle_old_alerts(service: Service, *, end: datetime) -> None:
    """The admin's work on the queue: older alerts of jobs resolved, one in three acknowledged
    (through the same call as the alerts page's buttons)."""
    admin = system_principal("admin")
    cutoff = end - timedelta(days=HANDLED_AFTER_DAYS)
    handled = [a for a in service.alerts(admin) if a.last_seen < cutoff and a.job_id]
    for index, alert in enumerate(sorted(handled, key=lambda a: a.last_seen)):
        state = AlertState.RESOLVED if index % 3 else AlertState.ACKNOWLEDGED
        service.set_alert_state(admin, alert.key, state, now=alert.last_seen + timedelta(hours=3))
