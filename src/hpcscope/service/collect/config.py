"""How often the collector cycles (:class:`CollectorConfig`, from a site's settings), and what
one cycle did (:class:`CycleReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from hpcscope.service.collect.source import Health
from hpcscope.service.settings import Settings


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    """The collector's cycle: how often, and how long a source may wait on the network."""

    scrape_interval_seconds: float = 15.0
    scrape_timeout_seconds: float = 5.0

    @classmethod
    def from_settings(cls, settings: Settings) -> CollectorConfig:
        return cls(
            scrape_interval_seconds=settings.scrape_interval_seconds,
            scrape_timeout_seconds=settings.scrape_timeout_seconds,
        )


@dataclass
class CycleReport:
    """What one collection cycle did (returned for tests and logs): each source's health row,
    and the sums the status line reads."""

    started_at: datetime
    polls: list[Health] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def of(self, source: str) -> Health:
        """The health row of one source's poll in this cycle."""
        for health in self.polls:
            if health.source == source:
                return health
        raise KeyError(f"no source {source!r} in this cycle: {[h.source for h in self.polls]}")

    @property
    def targets(self) -> int:
        return sum(h.targets for h in self.polls)

    @property
    def ok(self) -> int:
        return sum(h.ok for h in self.polls)

    @property
    def rows_written(self) -> int:
        return sum(h.rows for h in self.polls)

    @property
    def samples_written(self) -> int:
        return sum(h.samples for h in self.polls)

    @property
    def jobs_written(self) -> int:
        return sum(h.jobs for h in self.polls)

    @property
    def alerts_written(self) -> int:
        return sum(h.alerts for h in self.polls)
