"""The workbook's arithmetic: budgets, burn rates, the multiwindow condition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.slo.budget import (
    WORKBOOK_PAIRS,
    budget_remaining_ratio,
    burn_rate,
    error_budget_ratio,
    pair_fires,
    sli_ratio,
)

objectives = st.floats(min_value=0.01, max_value=0.999)
counts = st.integers(min_value=0, max_value=10_000)


def test_the_workbook_pairs_spend_2_and_5_percent() -> None:
    page, ticket = WORKBOOK_PAIRS
    assert (page.long_window_seconds, page.short_window_seconds, page.burn_rate) == (
        3600,
        300,
        14.4,
    )
    assert (ticket.long_window_seconds, ticket.short_window_seconds) == (21600, 1800)
    assert page.budget_consumed_ratio == pytest.approx(0.02)
    assert ticket.budget_consumed_ratio == pytest.approx(0.05)
    assert page.short_window_seconds * 12 == page.long_window_seconds


def test_examples() -> None:
    assert error_budget_ratio(0.999) == pytest.approx(0.001)
    assert sli_ratio(0, 0) is None and burn_rate(0, 0, objective_ratio=0.9) is None
    # 99.9 %: 1.44 % errors burn 14.4x
    assert burn_rate(9856, 10_000, objective_ratio=0.999) == pytest.approx(14.4)
    assert budget_remaining_ratio(95, 100, objective_ratio=0.9) == pytest.approx(0.5)
    assert budget_remaining_ratio(80, 100, objective_ratio=0.9) == pytest.approx(-1.0)
    assert budget_remaining_ratio(0, 0, objective_ratio=0.9) == 1.0
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        error_budget_ratio(1.0)


@given(objectives, counts, counts)
def test_burn_rate_and_budget_agree(objective: float, good: int, bad: int) -> None:
    total = good + bad
    rate = burn_rate(good, total, objective_ratio=objective)
    remaining = budget_remaining_ratio(good, total, objective_ratio=objective)
    if total == 0:
        assert rate is None and remaining == 1.0
        return
    assert rate is not None
    # over the SLO window itself, a burn rate of r leaves 1 - r of the budget
    assert remaining == pytest.approx(1.0 - rate, abs=1e-9)
    assert 0.0 <= rate <= 1.0 / (1.0 - objective) + 1e-9


@given(objectives, st.integers(1, 1000), st.integers(0, 1000), st.integers(1, 50))
def test_burn_rate_is_scale_free(objective: float, good: int, bad: int, k: int) -> None:
    one = burn_rate(good, good + bad, objective_ratio=objective)
    many = burn_rate(good * k, (good + bad) * k, objective_ratio=objective)
    assert one == pytest.approx(many)


@given(st.one_of(st.none(), st.floats(0, 100)), st.one_of(st.none(), st.floats(0, 100)))
def test_a_pair_needs_both_windows(long: float | None, short: float | None) -> None:
    page = WORKBOOK_PAIRS[0]
    fires = pair_fires(long, short, page)
    assert fires == (long is not None and short is not None and min(long, short) > 14.4)
