"""Upkeep the collector runs once per N cycles: kept summaries, then the retention pass.

Tiers (``docs/storage.md``): raw ``gpu_samples`` for ``raw_retention_days``, final 1-minute
rollups for ``rollup_retention_days``, job summaries forever. The pass

1. summarises the finished jobs that have no summary yet (the backfill of a store written
   before migration 7 happens here, on the first cycle after the upgrade);
2. finalises rollup minutes older than ``60 s + rollup_grace_seconds`` by the clock (when
   collection stopped no watermark moves);
3. deletes raw samples older than the raw retention **of summarised jobs only**, and only in
   minutes whose rollups are final;
4. deletes final rollup minutes older than the rollup retention;
5. drops the stored time series that read what steps 3 and 4 deleted
   (``service/jobs/documents.py``: the keeper computes them again).

A job whose raw samples were dropped still answers from its summary (report) and its rollups
(time series); where neither is left the time series says ``out_of_retention``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hpcscope.model.backends import GpuMetrics
from hpcscope.model.timeutil import utcnow
from hpcscope.service.jobs import documents
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from hpcscope.store import summaries as kept

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpkeepConfig:
    """How long each tier lives and how often the pass runs."""

    raw_retention_days: float = 14.0
    rollup_retention_days: float = 400.0
    rollup_grace_seconds: float = 120.0
    every_cycles: int = 60

    @classmethod
    def from_settings(cls, settings: Settings) -> UpkeepConfig:
        return cls(
            raw_retention_days=settings.raw_retention_days,
            rollup_retention_days=settings.rollup_retention_days,
            rollup_grace_seconds=settings.rollup_grace_seconds,
            every_cycles=settings.upkeep_every_cycles,
        )


@dataclass(frozen=True, slots=True)
class UpkeepReport:
    """What one pass did."""

    summaries_written: int
    raw_samples_deleted: int
    rollup_rows_deleted: int


def run_upkeep(
    store: Store,
    config: UpkeepConfig,
    *,
    now: datetime,
    scrape_interval_seconds: float,
    metrics: GpuMetrics | None = None,
) -> UpkeepReport:
    """One pass of summaries and retention at ``now`` (steps in the module docstring);
    ``metrics``: where the summaries read GPU samples (default the store's own)."""
    written = summarise_finished_jobs(
        store, now=now, scrape_interval_seconds=scrape_interval_seconds, metrics=metrics
    )
    store.finalise_rollups(now - timedelta(seconds=60 + config.rollup_grace_seconds)).result()
    raw = kept.delete_raw_samples(
        store, before=now - timedelta(days=config.raw_retention_days), now=now
    ).result()
    rollups_before = now - timedelta(days=config.rollup_retention_days)
    rolled = kept.delete_final_rollups(store, before=rollups_before).result()
    if raw or rolled:  # the stored time series that read them are computed again
        documents.forget_after_retention(
            store,
            raw_before=now - timedelta(days=config.raw_retention_days) if raw else None,
            rollups_before=rollups_before if rolled else None,
        )
    return UpkeepReport(written, raw, rolled)


def run_upkeep_on_file(
    path: Path, config: UpkeepConfig, *, now: datetime, scrape_interval_seconds: float
) -> UpkeepReport:
    """:func:`run_upkeep` on a store file that no server holds (``hpcscope store upkeep``)."""
    with Store(path, rollup_grace_seconds=config.rollup_grace_seconds) as store:
        return run_upkeep(store, config, now=now, scrape_interval_seconds=scrape_interval_seconds)


class Upkeep:
    """Runs :func:`run_upkeep` on the collector's first cycle and once per ``every_cycles``."""

    def __init__(
        self,
        store: Store,
        config: UpkeepConfig,
        *,
        scrape_interval_seconds: float,
        now: Callable[[], datetime] = utcnow,
        metrics: GpuMetrics | None = None,
    ):
        self.store = store
        self.config = config
        self.scrape_interval_seconds = scrape_interval_seconds
        self.metrics = metrics
        self._now = now  # the collector passes its own clock (tests: simulated time)
        self._cycles = 0
        self.last: UpkeepReport | None = None

    def after_cycle(self) -> UpkeepReport | None:
        """Count a collector cycle; run the pass when due. A failure is logged, never raised
        (collection goes on; the next due cycle tries again)."""
        due = self._cycles % self.config.every_cycles == 0
        self._cycles += 1
        if not due:
            return None
        try:
            self.last = run_upkeep(
                self.store,
                self.config,
                now=self._now(),
                scrape_interval_seconds=self.scrape_interval_seconds,
                metrics=self.metrics,
            )
        except Exception:  # upkeep must never stop collection
            log.exception("upkeep (summaries, retention) failed")
            return None
        if self.last.summaries_written or self.last.raw_samples_deleted:
            log.info(
                "upkeep: %d job summaries written, %d raw samples and %d rollup rows dropped",
                self.last.summaries_written,
                self.last.raw_samples_deleted,
                self.last.rollup_rows_deleted,
            )
        return self.last
