"""Burn-rate alerts into the alert engine, and the counters ``/metrics`` exports.

After collector cycles (:class:`SloUpkeep`, an ``after_cycle`` hook the server passes), the
three SLOs are evaluated cluster-wide at the collector's clock; every multiwindow pair whose
condition holds (``analysis/slo/budget.py``) is upserted as an alert of its pair's rule
(``analysis/slo/burn.py``: ``SLO-PAGE`` or ``SLO-TICKET``). The alerts name no job: the alerts
store shows an alert without a job to admins only.

The same evaluation is what Prometheus does from ``/metrics`` with the shipped rules
(``deploy/prometheus/hpcscope-slo-rules.yml``): :func:`slo_counters` are cumulative good and
bad events since the first record, so ``rate()`` over a window gives that window's ratio.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.analysis.slo import events as slo_events
from hpcscope.analysis.slo.burn import burn_alerts
from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert
from hpcscope.model.timeutil import utcnow
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.records import job_records, slo_events_of
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store

log = logging.getLogger(__name__)

_CLUSTER = JobScope(all_jobs=True)


def burn_rate_alerts(store: Store, config: SloConfig, *, now: datetime) -> list[Alert]:
    """The alerts of every SLO pair firing at ``now``, cluster-wide (module docstring)."""
    longest = max([config.window_seconds, *(p.long_window_seconds for p in config.pairs)])
    records = job_records(store, _CLUSTER, since=now - timedelta(seconds=longest))
    events = slo_events_of(records, config, now=now)
    alerts: list[Alert] = []
    for definition in config.definitions:
        status = slo_events.slo_status(
            events.by_slo[definition.slo],
            now=now,
            objective_ratio=definition.objective_ratio,
            window_seconds=config.window_seconds,
            pairs=config.pairs,
        )
        alerts += burn_alerts(
            status,
            slo=definition.slo,
            title=definition.title,
            objective_ratio=definition.objective_ratio,
            window_seconds=config.window_seconds,
            now=now,
        )
    return alerts


def evaluate_into_alerts(store: Store, config: SloConfig, *, now: datetime) -> int:
    """Evaluate and upsert the firing alerts; returns how many were written."""
    alerts = burn_rate_alerts(store, config, now=now)
    return alert_store.upsert_alerts(store, alerts).result() if alerts else 0


class SloUpkeep:
    """Evaluates the burn-rate alerts on the collector's first cycle and once per
    ``config.evaluate_every_cycles``."""

    def __init__(
        self, store: Store, config: SloConfig, *, now: Callable[[], datetime] = utcnow
    ) -> None:
        self.store = store
        self.config = config
        self._now = now
        self._cycles = 0
        self.last_written: int | None = None

    def after_cycle(self) -> int | None:
        """Count a cycle; evaluate when due. A failure is logged, never raised."""
        due = self._cycles % self.config.evaluate_every_cycles == 0
        self._cycles += 1
        if not due:
            return None
        try:
            self.last_written = evaluate_into_alerts(self.store, self.config, now=self._now())
        except Exception:  # SLO evaluation must never stop collection
            log.exception("SLO burn-rate evaluation failed")
            return None
        return self.last_written


@dataclass(frozen=True, slots=True)
class SloCounter:
    """Cumulative events of one SLO since the first record (``/metrics``)."""

    slo: str
    event_unit: str
    good: float
    bad: float
    objective_ratio: float
    budget_remaining_ratio: float


def slo_counters(store: Store, config: SloConfig, *, now: datetime) -> list[SloCounter]:
    """Every SLO's good and bad events ever (cluster-wide), and its remaining budget."""
    events = slo_events_of(job_records(store, _CLUSTER, since=None), config, now=now)
    counters = []
    for definition in config.definitions:
        frame = events.by_slo[definition.slo]
        good = float(frame["good"].sum()) if frame.height else 0.0
        total = float(frame["total"].sum()) if frame.height else 0.0
        status = slo_events.slo_status(
            frame,
            now=now,
            objective_ratio=definition.objective_ratio,
            window_seconds=config.window_seconds,
            pairs=(),
        )
        counters.append(
            SloCounter(
                slo=definition.slo,
                event_unit=definition.event_unit,
                good=good,
                bad=max(0.0, total - good),
                objective_ratio=definition.objective_ratio,
                budget_remaining_ratio=status.budget_remaining_ratio,
            )
        )
    return counters
