"""The alert engine for security events: drain the buffer, evaluate the rules, store alerts.

Wiring (``docs/security.md``): Falco's ``http_output`` (``POST /api/ingest/falco``), the Falco
and Tetragon files a site names (``falco_events_path``, ``tetragon_events_path``, tailed by
:class:`~hpcscope.service.security.sources.FalcoSource` and
:class:`~hpcscope.service.security.sources.TetragonSource`) all put parsed rows into one
:class:`~hpcscope.service.security.buffer.SecurityEventBuffer`. Each collector cycle,
:meth:`SecurityCollection.collect_once` polls the tails, drains the buffer into
:class:`~hpcscope.analysis.alerts.events.EventRules` with the jobs' owners from the store,
and upserts the alerts (deduplicated by key: a repeated firing grows ``count``); the events
that touched a protected path become access records (``file_access``: who read my weights).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

import pyarrow as pa

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.analysis.alerts.correlation import CorrelationRules, Egress
from hpcscope.analysis.alerts.events import EventRules, EventVerdict
from hpcscope.analysis.alerts.falco_meaning import FalcoMeaning
from hpcscope.analysis.alerts.file_access import access_records
from hpcscope.analysis.registry import RuleKind, registry
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.model.security_events import FalcoRow, TetragonRow
from hpcscope.model.timeutil import utcnow
from hpcscope.service.alerts.falco_meaning import load_falco_meaning, meaning_path
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.sources import FalcoSource, TetragonSource
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store.file_access import append_file_access

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SecurityCycle:
    """What one drain did.

    Attributes:
        falco_rows / tetragon_rows: events evaluated.
        alerts: alerts written (new or merged).
        access_records: accesses to protected paths stored ("who read my weights").
        errors: lines that did not parse (``source:line: message``), the first few.
        dropped_rows: events the buffer dropped since the last drain (it was full).
    """

    falco_rows: int = 0
    tetragon_rows: int = 0
    alerts: int = 0
    access_records: int = 0
    errors: tuple[str, ...] = ()
    dropped_rows: int = 0


def owners_of(store: Store, verdict_jobs: Sequence[str]) -> dict[str, JobOwner]:
    """The owner of each job the events name, from the store's ``jobs``."""
    return {
        job: JobOwner(user, account)
        for job, (user, account) in alert_store.job_owners(store, verdict_jobs).items()
    }


def evaluate_drained(
    store: Store,
    engine: EventRules,
    falco: list[FalcoRow],
    tetragon: list[TetragonRow],
) -> tuple[EventVerdict, int]:
    """Evaluate one drain's rows and store its alerts; returns the verdict and the alerts
    written."""
    jobs = sorted(
        {r["job_id"] for r in falco if r["job_id"]} | {r["job_id"] for r in tetragon if r["job_id"]}
    )
    verdict = engine.evaluate_rows(falco, tetragon, owners=owners_of(store, jobs))
    written = alert_store.upsert_alerts(store, verdict.alerts).result() if verdict.alerts else 0
    return verdict, written


@dataclass
class SecurityCollection:
    """The buffer, the tailed sources feeding it and the engine draining it.

    Args:
        store: where alerts go.
        buffer: the app's security event buffer (shared with ``POST /api/ingest/falco``).
        rules: the site's rules by id.
        checkpoint_roots: what W-1/W-3 watch (the topology's checkpoint root).
        dataset_roots: the topology's dataset roots (DP-6).
        falco_meaning: what each Falco rule means (``deploy/rules/falco/meaning.yaml``);
            None: the bundled table.
        protected_roots: whose accesses are recorded (checkpoints, weights, datasets: the
            topology's protected roots); empty: the checkpoint roots.
        falco_path / tetragon_path: files to tail (Falco ``file_output``, Tetragon export).
        proc_root: where Tetragon processes' cgroups are read (``/proc``; tests pass a tree).
    """

    store: Store
    buffer: SecurityEventBuffer
    rules: Mapping[str, RuleSpec]
    checkpoint_roots: Sequence[str] = ()
    dataset_roots: Sequence[str] = ()
    falco_meaning: FalcoMeaning | None = None
    protected_roots: Sequence[str] = ()
    falco_path: Path | None = None
    tetragon_path: Path | None = None
    proc_root: Path = Path("/proc")
    sources: list[FalcoSource | TetragonSource] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.engine = EventRules(
            self.rules,
            checkpoint_roots=self.checkpoint_roots,
            dataset_roots=self.dataset_roots,
            meaning=self.falco_meaning or load_falco_meaning(meaning_path(None)),
        )
        self.correlation = CorrelationRules(self.rules)
        if self.falco_path is not None:
            self.sources.append(FalcoSource(self.falco_path, self.buffer))
        if self.tetragon_path is not None:
            self.sources.append(
                TetragonSource(self.tetragon_path, self.buffer, proc_root=self.proc_root)
            )

    def _correlate(self, records: pa.Table, verdict: EventVerdict) -> int:
        """W-2 over the batch's access records and alerts, and egress alerts other engines
        stored (RD-2); returns the alerts written."""
        if self.correlation.spec is None or (records.num_rows == 0 and not verdict.alerts):
            return 0
        rows = records.to_pylist()
        times = [r["ts"] for r in rows] + [a.first_seen for a in verdict.alerts]
        within = timedelta(seconds=self.correlation.spec.threshold("egress_within_seconds"))
        events = registry().ids(RuleKind.EVENT)
        foreign = [r for r in self.correlation.egress_rules if r not in events]
        stored = alert_store.recent_alerts(self.store, foreign, since=min(times) - within)
        egress = [Egress(a.rule_id, a.job_id, a.node, a.first_seen, a.title) for a in stored]
        jobs = [str(r["job_id"]) for r in rows if r["job_id"] is not None]
        found = self.correlation.evaluate(
            rows, verdict.alerts, owners=owners_of(self.store, jobs), egress=egress
        )
        return alert_store.upsert_alerts(self.store, found).result() if found else 0

    def collect_once(self, *, now: datetime | None = None) -> SecurityCycle:
        """Poll the tails, drain the buffer, evaluate, store (one caller at a time: the
        server's :class:`SecurityLoop` and the collector's cycle may both call it).

        Each tail's poll is also a ``scrapes`` row (exporter ``falco`` or ``tetragon``, target
        the file, rows parsed, lines rejected; not ok while the file does not exist), so the
        diagram's collectors show the sources' health like the exporters'.
        """
        with self._lock:
            return self._collect(now)

    def _collect(self, now: datetime | None) -> SecurityCycle:
        polls: list[dict[str, object]] = []
        for source in self.sources:
            started = time.perf_counter()
            result = source.poll()
            polls.append(
                source.scrape_row(
                    now or utcnow(),
                    started=started,
                    rows=result.table.num_rows,
                    rejected=len(result.errors),
                )
            )
        if polls:
            self.store.append("scrapes", pa.Table.from_pylist(polls, schema=SCRAPE_SCHEMA))
        for tail in self.buffer.tails:  # the tails the collector polls as sources of their own
            if all(tail is not own for own in self.sources):
                tail.poll()
        drained = self.buffer.drain()
        if drained.dropped_rows:
            log.warning("security event buffer was full: %d events dropped", drained.dropped_rows)
        falco = cast(list[FalcoRow], drained.falco.to_pylist())  # read once: rules, records
        tetragon = cast(list[TetragonRow], drained.tetragon.to_pylist())
        verdict, written = evaluate_drained(self.store, self.engine, falco, tetragon)
        records = access_records(
            tetragon, falco, protected=self.protected_roots or self.checkpoint_roots
        )
        stored = append_file_access(self.store, records).result() if records.num_rows else 0
        written += self._correlate(records, verdict)
        return SecurityCycle(
            falco_rows=verdict.falco_rows,
            tetragon_rows=verdict.tetragon_rows,
            alerts=written,
            access_records=stored,
            errors=tuple(str(e) for e in drained.errors[:20]),
            dropped_rows=drained.dropped_rows,
        )


class SecurityLoop:
    """The alert engine's own loop: :meth:`SecurityCollection.collect_once` every
    ``interval_seconds`` in a thread, so the detection delay does not wait for the collector's
    cycle (its scrapes and after-cycle rules take seconds on a large cluster).

    Args:
        collection: the engine and its sources.
        interval_seconds: the pause between two runs (``security_events.poll_seconds``).
    """

    def __init__(self, collection: SecurityCollection, *, interval_seconds: float) -> None:
        self.collection = collection
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run in a daemon thread until :meth:`stop` (a second call does nothing)."""
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="security-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop (the collector's last cycle reads what arrived since)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _once(self) -> None:
        try:
            cycle = self.collection.collect_once()
        except Exception:  # a bad stream or a store hiccup must not end the loop
            log.exception("security event collection failed")
            return
        for error in cycle.errors:
            log.warning("security events: %s", error)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            self._once()
