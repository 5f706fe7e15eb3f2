"""Chargeback periods: parsing, months, and the time split of jobs across boundaries."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.chargeback.periods import (
    ChargebackPeriodError,
    months_ending,
    overlap_share,
    parse_period,
)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("2026-11", datetime(2026, 11, 1), datetime(2026, 12, 1)),
        ("2026-12", datetime(2026, 12, 1), datetime(2027, 1, 1)),
        ("2026", datetime(2026, 1, 1), datetime(2027, 1, 1)),
        ("2026-02-28", datetime(2026, 2, 28), datetime(2026, 3, 1)),
        ("2026-11-01..2026-11-15", datetime(2026, 11, 1), datetime(2026, 11, 16)),
    ],
)
def test_parse(text: str, start: datetime, end: datetime) -> None:
    period = parse_period(text)
    assert (period.start, period.end, period.label) == (start, end, text)


@pytest.mark.parametrize(
    "text", ["", "2026-13", "2026-02-30", "11-2026", "2026-11-15..2026-11-01", "last month"]
)
def test_bad_period_is_a_typed_error_naming_it(text: str) -> None:
    with pytest.raises(ChargebackPeriodError, match="period"):
        parse_period(text)


def test_months_ending() -> None:
    labels = [m.label for m in months_ending(parse_period("2027-02"), 4)]
    assert labels == ["2026-11", "2026-12", "2027-01", "2027-02"]
    assert [m.label for m in months_ending(parse_period("2026"), 2)] == ["2026-11", "2026-12"]


def test_split_at_a_month_boundary() -> None:
    start, end = datetime(2026, 10, 31, 18), datetime(2026, 11, 1, 6)
    assert overlap_share(start, end, parse_period("2026-10")) == 0.5
    assert overlap_share(start, end, parse_period("2026-11")) == 0.5
    assert overlap_share(start, end, parse_period("2026-12")) == 0.0
    assert overlap_share(None, end, parse_period("2026-11")) == 1.0


@settings(max_examples=200, deadline=None)
@given(
    start_minutes=st.integers(0, 400 * 24 * 60),
    length_seconds=st.integers(1, 100 * 86_400),
)
def test_shares_over_months_that_tile_a_job_sum_to_one(
    start_minutes: int, length_seconds: int
) -> None:
    start = datetime(2026, 1, 1) + timedelta(minutes=start_minutes)
    end = start + timedelta(seconds=length_seconds)
    months = months_ending(parse_period(end.strftime("%Y-%m")), 20)
    assert months[0].start <= start
    total = sum(overlap_share(start, end, m) for m in months)
    assert math.isclose(total, 1.0, rel_tol=1e-12)
