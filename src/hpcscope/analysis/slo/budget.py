"""Error budgets and burn rates: the arithmetic of the SRE workbook's "Alerting on SLOs".

Definitions (Google, *The Site Reliability Workbook*, chapter 5 "Alerting on SLOs"):

* SLI = good events / valid events over a window (a ratio, 0-1);
* error budget = ``1 - objective`` (the share of events allowed to be bad);
* remaining budget = ``1 - bad / (budget x total)`` over the SLO window: 1 untouched, 0 spent,
  negative overspent;
* burn rate over a window = ``error ratio / budget``: 1 spends the budget exactly over the
  SLO window, 14.4 spends 2 % of a 30-day budget in one hour;
* a multiwindow multi-burn-rate alert fires when the burn rate is above the pair's threshold
  over both its long window (significant budget spent) and its short window (still burning
  now, so the alert resets quickly once the cause is gone). The workbook's page and ticket
  pairs are 1 h / 5 min at 14.4 and 6 h / 30 min at 6.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds in the workbook's reference SLO window (30 days), to which 14.4 and 6 refer.
WORKBOOK_WINDOW_SECONDS = 30 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class BurnRatePair:
    """One multiwindow alert: both windows must burn faster than ``burn_rate``.

    Attributes:
        name: ``page`` or ``ticket`` (the workbook's words; rule ids and alert names use it).
        long_window_seconds: the window that shows the budget spent is significant.
        short_window_seconds: the window that shows it is still burning (1/12 of the long).
        burn_rate: the threshold on both windows' burn rates.
        severity: ``critical`` (page) or ``warning`` (ticket), as in the Prometheus rules.
    """

    name: str
    long_window_seconds: float
    short_window_seconds: float
    burn_rate: float
    severity: str

    @property
    def budget_consumed_ratio(self) -> float:
        """The share of a workbook (30-day) budget spent over the long window at the
        threshold: 14.4 x 1 h / 30 d = 2 %."""
        return self.burn_rate * self.long_window_seconds / WORKBOOK_WINDOW_SECONDS


#: The workbook's two pairs (table 5-8): page on 2 % of the budget in 1 h, ticket on 5 % in 6 h.
WORKBOOK_PAIRS = (
    BurnRatePair("page", 3600.0, 300.0, 14.4, "critical"),
    BurnRatePair("ticket", 6 * 3600.0, 1800.0, 6.0, "warning"),
)


def error_budget_ratio(objective_ratio: float) -> float:
    """The share of events allowed to be bad: ``1 - objective``.

    Raises:
        ValueError: the objective is not strictly between 0 and 1.
    """
    if not 0.0 < objective_ratio < 1.0:
        raise ValueError(f"an objective is a ratio strictly between 0 and 1, not {objective_ratio}")
    return 1.0 - objective_ratio


def sli_ratio(good: float, total: float) -> float | None:
    """Good over total events; None when there was no event (an SLI is undefined then)."""
    if total <= 0:
        return None
    return min(1.0, max(0.0, good / total))


def burn_rate(good: float, total: float, *, objective_ratio: float) -> float | None:
    """How fast the window spends the budget: ``(bad / total) / (1 - objective)``.

    None without events: no evidence of burning (the alert condition is then false).
    """
    sli = sli_ratio(good, total)
    if sli is None:
        return None
    return (1.0 - sli) / error_budget_ratio(objective_ratio)


def budget_remaining_ratio(good: float, total: float, *, objective_ratio: float) -> float:
    """The unspent share of the error budget over the SLO window: ``1 - bad / (budget x total)``.

    1.0 without events (nothing spent); 0 when exactly spent; negative when overspent.
    """
    if total <= 0:
        return 1.0
    bad = max(0.0, total - good)
    return 1.0 - bad / (error_budget_ratio(objective_ratio) * total)


def pair_fires(
    long_burn_rate: float | None, short_burn_rate: float | None, pair: BurnRatePair
) -> bool:
    """The multiwindow condition: both windows burn faster than the pair's threshold."""
    return (
        long_burn_rate is not None
        and short_burn_rate is not None
        and long_burn_rate > pair.burn_rate
        and short_burn_rate > pair.burn_rate
    )
