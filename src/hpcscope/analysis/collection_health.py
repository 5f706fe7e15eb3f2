"""OPS-1, the collection-health rule: a target not collected for too long. Pure.

A gap is a span in which a target was not collected (a ``collection_gaps`` row): its scrapes
failed, or nobody scraped it (the collector was down or stalled). The collector's health
tracker (``service/collect/health.py``) finds the gaps; a gap at least its silence threshold
long raises ``OPS-1`` (vector ``SERVICE_LEVEL``, subject the target's URL), once while the
target is still failing and again when its gap closes, so one outage is one alert whose count
and ``last_seen`` grow (``docs/scraping.md``, "Faults").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.rules import Rule, RuleKind
from hpcscope.model.timeutil import iso_z

#: The collection-health rule.
RULE_ID = "OPS-1"


@dataclass(frozen=True, slots=True)
class Gap:
    """A span in which a target was not collected (a ``collection_gaps`` row)."""

    target: str
    node: str | None
    start_ts: datetime
    end_ts: datetime
    reason: str

    @property
    def seconds(self) -> float:
        return (self.end_ts - self.start_ts).total_seconds()

    def row(self) -> dict[str, object]:
        return {
            "target": self.target,
            "node": self.node,
            "start_ts": self.start_ts,
            "end_ts": self.end_ts,
            "reason": self.reason,
        }


def gap_alert(gap: Gap, *, now: datetime, ongoing: bool = False) -> Alert:
    """The ``OPS-1`` alert of one gap (``ongoing``: the target is still not collected)."""
    state = "not collected for" if ongoing else "was not collected for"
    return Alert(
        rule_id=RULE_ID,
        vector=Vector.SERVICE_LEVEL,
        severity=Severity.MEDIUM,
        title=f"collection gap: {gap.target} {state} {gap.seconds:.0f} s ({gap.reason})",
        first_seen=now,
        last_seen=now,
        node=gap.node,
        subject=gap.target,
        evidence=(
            Evidence(
                summary=f"no samples from {iso_z(gap.start_ts)} to {iso_z(gap.end_ts)} "
                f"({gap.seconds:.0f} s): {gap.reason}",
                source="collection_gaps" if not ongoing else "scrapes",
                position=f"target {gap.target}",
                link="/api/cluster",
            ),
        ),
    )


RULES: tuple[Rule, ...] = (
    Rule(
        RULE_ID, Vector.SERVICE_LEVEL, RuleKind.HEALTH, gap_alert, in_rule_file=False,
        severity=Severity.MEDIUM, title="A scrape target not collected for longer than "
        "the silence threshold (2 intervals + the timeout)",
    ),
)  # fmt: skip
