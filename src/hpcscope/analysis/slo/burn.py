"""SLO-PAGE and SLO-TICKET: an SLO's error budget burning, as alerts. Pure.

Every multiwindow pair of an SLO whose condition holds at ``now`` (:class:`~.events.SloStatus`,
``analysis/slo/budget.py``) is one alert: rule ``SLO-PAGE`` (critical) for the workbook's page
pair, ``SLO-TICKET`` (medium) for its ticket pair; vector ``SERVICE_LEVEL``, subject the SLO's
name, so a burn that goes on grows one alert's count. The alerts name no job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from hpcscope.analysis.slo.events import SloStatus
from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.rules import Rule, RuleKind


def _window(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds / 60:g}m"


def burn_alerts(
    status: SloStatus,
    *,
    slo: str,
    title: str,
    objective_ratio: float,
    window_seconds: float,
    now: datetime,
) -> list[Alert]:
    """The alerts of one SLO's firing pairs at ``now``.

    Args:
        status: the SLO's status at ``now`` (its firing pairs among it).
        slo: the SLO's name (the alerts' subject).
        title: the SLO's title for a person.
        objective_ratio: its objective.
        window_seconds: the SLO window (the budget's).
        now: the evaluation time (first and last seen).

    Raises:
        ValueError: a firing pair no rule is declared for (:data:`PAIR_RULES`).
    """
    alerts: list[Alert] = []
    for pair in status.firing:
        rule = PAIR_RULES.get(pair.name)
        if rule is None or rule.severity is None:
            raise ValueError(f"no SLO burn rule for the pair {pair.name!r} ({list(PAIR_RULES)})")
        long = status.burn(pair.long_window_seconds)
        short = status.burn(pair.short_window_seconds)
        windows = f"{_window(pair.long_window_seconds)}/{_window(pair.short_window_seconds)}"
        alerts.append(
            Alert(
                rule_id=rule.rule_id,
                vector=rule.vector,
                severity=rule.severity,
                title=f"{title}: error budget burning {long:.1f}x over "
                f"{_window(pair.long_window_seconds)} (objective {objective_ratio:.1%})",
                first_seen=now,
                last_seen=now,
                subject=slo,
                evidence=(
                    Evidence(
                        summary=f"burn rate {long:.2f}x ({_window(pair.long_window_seconds)})"
                        f" and {short:.2f}x ({_window(pair.short_window_seconds)}) above "
                        f"{pair.burn_rate:g}x; budget left "
                        f"{status.budget_remaining_ratio:.1%} of "
                        f"{window_seconds / 86400:g} days",
                        source="jobs + job_summaries",
                        position=f"{windows} ending {now.isoformat()}Z",
                        link="/slo",
                    ),
                ),
            )
        )
    return alerts


def _burn_rule(rule_id: str, severity: Severity, title: str) -> Rule:
    return Rule(
        rule_id, Vector.SERVICE_LEVEL, RuleKind.SLO_BURN, burn_alerts, in_rule_file=False,
        severity=severity, title=title,
    )  # fmt: skip


#: Each burn-rate pair's rule (the pairs of ``budget.WORKBOOK_PAIRS``).
PAIR_RULES: Mapping[str, Rule] = {
    "page": _burn_rule("SLO-PAGE", Severity.CRITICAL,
                       "An SLO's error budget burns fast (the page pair: 1 h and 5 min)"),
    "ticket": _burn_rule("SLO-TICKET", Severity.MEDIUM,
                         "An SLO's error budget burns slowly (the ticket pair: 6 h and 30 min)"),
}  # fmt: skip
RULES: tuple[Rule, ...] = tuple(PAIR_RULES.values())
