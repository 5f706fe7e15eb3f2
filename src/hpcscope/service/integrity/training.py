"""The training recorder's events in the integrity spool: ``<root>/<job>/training-<rank>.jsonl``.

Read beside the gradient records by :class:`~.spool.IntegritySpool` each collector cycle (same
spool, same setting ``integrity_spool_dir``): new complete lines are parsed
(:mod:`hpcscope.ingest.integrity.training_events`), each event is placed on the platform's job
(the allocation holding the claimed node's GPU at its time, never the process' claim), the
producers of loaded paths are looked up in the Lustre changelog (``CREAT`` records), and W-4
and DP-5 (:mod:`hpcscope.analysis.integrity.training`) run over each job's events. An alert is
written when it is new or its ``last_seen`` moved (a re-run does not count an old firing again).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from hpcscope.analysis.integrity.training import Placed, Producer, training_alerts
from hpcscope.ingest.integrity.training_events import parse_event_lines
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.model.training_events import TrainingEvent
from hpcscope.service.spool import Tails
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store import slurm as slurm_store
from hpcscope.store.telemetry_rules import path_creators

log = logging.getLogger(__name__)

PATTERN = "training-*.jsonl"
#: Events kept per job (DP-5 judges windows; W-4 needs each load once): oldest dropped first.
KEPT_EVENTS = 20_000


@dataclass
class TrainingCycle:
    """What one pass did."""

    events: int = 0
    alerts: int = 0
    errors: list[str] = field(default_factory=list)


class TrainingEventsSpool:
    """Reads the recorder's files of every job directory under ``root``; raises W-4, DP-5."""

    def __init__(self, store: Store, root: Path, rules: Mapping[str, RuleSpec]) -> None:
        self.store = store
        self.root = root
        self.rules = rules
        self._tails = Tails()  # complete lines, rotation: service/spool.py
        self._events: dict[str, list[Placed]] = {}
        self._written: dict[str, datetime] = {}
        self._placements: dict[tuple[str, int | None, int], tuple[str | None, ...]] = {}

    def _new_lines(self, path: Path) -> list[tuple[int, bytes]]:
        return self._tails.read(path).numbered()

    def _place(self, event: TrainingEvent) -> Placed:
        """The platform's job on the claimed node and GPU at the event's time (one query per
        GPU and minute in a cycle, not one per event)."""
        key = (event.node, event.gpu, int(event.ts // 60))
        found = self._placements.get(key)
        if found is None:
            at = from_epoch_seconds(event.ts)
            found = (None, None, None)
            for row in slurm_store.allocations_between(self.store, at, at).to_pylist():
                if row["node"] == event.node and (event.gpu is None or row["gpu"] == event.gpu):
                    found = (row["job_id"], row["user"], row["account"])
                    break
            self._placements[key] = found
        return Placed(event, *found)

    def collect_once(self) -> TrainingCycle:
        """Read new lines, evaluate each job that has events, store new firings."""
        cycle = TrainingCycle()
        self._placements.clear()  # allocations may have changed since the last cycle
        try:
            paths = sorted(self.root.glob(f"*/{PATTERN}"))
        except OSError as exc:
            cycle.errors.append(f"{self.root}: {exc.strerror or exc}")
            return cycle
        for path in paths:
            try:
                lines = self._new_lines(path)
            except OSError as exc:
                cycle.errors.append(f"{path}: cannot read: {exc.strerror or exc}")
                continue
            parsed = parse_event_lines(lines, source=str(path))
            cycle.errors += [e.describe() for e in parsed.errors]
            kept = self._events.setdefault(path.parent.name, [])
            kept += [self._place(e) for e in parsed.events]
            del kept[:-KEPT_EVENTS]
            cycle.events += len(parsed.events)
        events = [p for placed in self._events.values() for p in placed]
        if not events:
            return cycle
        paths_loaded = sorted({p.event.path for p in events if p.event.path is not None})
        creators = path_creators(self.store, paths_loaded)
        owners = alert_store.job_owners(self.store, sorted(set(creators.values())))
        producers = {
            path: Producer(job, owners.get(job, (None, None))[1]) for path, job in creators.items()
        }
        fresh = []
        for alert in training_alerts(events, producers, self.rules):
            before = self._written.get(alert.key)
            if before is not None and alert.last_seen <= before:
                continue
            fresh.append(alert if before is None else replace(alert, count=1))
            self._written[alert.key] = alert.last_seen
        if fresh:
            cycle.alerts = alert_store.upsert_alerts(self.store, fresh).result()
        for error in cycle.errors[:5]:
            log.warning("training events: %s", error)
        return cycle
