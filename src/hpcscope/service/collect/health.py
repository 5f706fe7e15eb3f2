"""The collector's own health: gaps per target, and the collection-health alert ``OPS-1``.

A target is *collected until* its last successful scrape. Two things open a gap:

- its scrapes fail (down, slower than the timeout, garbage, a page that does not convert):
  the gap runs from the last success to the next success (or to a clean shutdown,
  :meth:`CollectionHealth.close_open`);
- nobody scraped it: the collector was not running (killed, host down) or stalled longer than
  :attr:`CollectionHealth.silence_seconds`. At start the tracker is seeded from the store
  (``store/reports.py`` :func:`collected_until`), so the first success after a restart closes a
  gap that starts at the last success before the outage.

A gap is a ``collection_gaps`` row, never samples: analysis and charts see no data there, not
zeros (``docs/scraping.md``, "Faults"). A gap at least :attr:`silence_seconds` long raises
``OPS-1`` (the rule: ``analysis/collection_health.py``): once when a failing target crosses
that length, and again when its gap closes; a collector outage is raised when the gap closes
after the restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from hpcscope.analysis.collection_health import RULE_ID, Gap, gap_alert
from hpcscope.model.alerts import Alert

__all__ = ["RULE_ID", "CollectionHealth", "Gap", "gap_alert"]


@dataclass
class CollectionHealth:
    """Per target: last success, failing since when, and the gaps and alerts they make.

    Args:
        silence_seconds: a span without a success longer than this is an outage (a gap even
            without failed scrapes, and an ``OPS-1`` alert).
        collected_until: per target URL, when it was last accounted for (from the store).
    """

    silence_seconds: float
    collected_until: dict[str, datetime] = field(default_factory=dict)
    _failing_since: dict[str, tuple[datetime, str]] = field(default_factory=dict)
    _alerted: set[str] = field(default_factory=set)

    def observe(
        self, target: str, node: str | None, ts: datetime, *, ok: bool, error: str | None
    ) -> tuple[Gap | None, Alert | None]:
        """One scrape's outcome: the gap it closes (if any) and the alert to raise (if any)."""
        last = self.collected_until.get(target)
        if not ok:
            if target not in self._failing_since:
                self._failing_since[target] = (last or ts, error or "scrape failed")
            since, reason = self._failing_since[target]
            gap = Gap(target, node, since, ts, reason)
            if gap.seconds >= self.silence_seconds and target not in self._alerted:
                self._alerted.add(target)
                return None, gap_alert(gap, now=ts, ongoing=True)
            return None, None
        self.collected_until[target] = ts
        self._alerted.discard(target)
        if target in self._failing_since:
            since, reason = self._failing_since.pop(target)
            gap = Gap(target, node, since, ts, reason)
        elif last is not None and (ts - last).total_seconds() > self.silence_seconds:
            reason = "not scraped: the collector was not running or stalled"
            gap = Gap(target, node, last, ts, reason)
        else:
            return None, None
        alert = gap_alert(gap, now=ts) if gap.seconds >= self.silence_seconds else None
        return gap, alert

    def close_open(self, now: datetime) -> list[Gap]:
        """At a clean shutdown: the gaps of targets still failing, ending ``now``."""
        gaps = [
            Gap(url, None, since, now, reason)
            for url, (since, reason) in self._failing_since.items()
        ]
        self._failing_since.clear()
        for gap in gaps:
            self.collected_until[gap.target] = now
        return gaps
