"""Chargeback rows: grouping, rates per GPU model, the time split and the trend."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.chargeback.aggregate import (
    NO_VALUE,
    GroupBy,
    Rates,
    charge_jobs,
    chargeback,
    totals,
    trend,
)
from hpcscope.analysis.chargeback.periods import months_ending, parse_period
from hpcscope.analysis.chargeback.waste import GpuUse, JobUse, WasteCause

RATES = Rates(default_gpu_hour=2.0, currency="EUR", per_model={"A100": 1.0})


def job(
    job_id: str,
    *,
    start: datetime,
    hours: float,
    gpus: int = 2,
    sm: float = 0.5,
    account: str | None = "vision",
    user: str = "alice",
    model: str | None = "H100",
) -> JobUse:
    seconds = hours * 3600
    return JobUse(
        job_id=job_id,
        user=user,
        account=account,
        partition="gpu",
        gpu_model=model,
        start_time=start,
        end_time=start + timedelta(seconds=seconds),
        gpus_allocated=gpus,
        allocated_gpu_seconds=gpus * seconds,
        observed_gpu_seconds=gpus * seconds,
        useful_gpu_seconds=gpus * seconds * sm,
        exit_cause="success",
        gpus=tuple(GpuUse(seconds, seconds * sm, "low_efficiency") for _ in range(gpus)),
    )


def test_rows_group_price_and_split() -> None:
    november = parse_period("2026-11")
    jobs = [
        job("1", start=datetime(2026, 11, 2), hours=10),  # H100 at the default 2.0
        job("2", start=datetime(2026, 11, 3), hours=10, model="A100", account="nlp", user="bob"),
        job("3", start=datetime(2026, 10, 31, 20), hours=8, account=None),  # half in November
        job("4", start=datetime(2026, 12, 1), hours=5),  # outside
    ]
    charged = charge_jobs(jobs)
    rows = {r.key: r for r in chargeback(charged, november, by=GroupBy.ACCOUNT, rates=RATES)}
    assert set(rows) == {"vision", "nlp", NO_VALUE}
    assert rows["vision"].allocated_gpu_seconds == 2 * 10 * 3600
    assert math.isclose(rows["vision"].cost, 20 * 2.0)
    assert math.isclose(rows["nlp"].cost, 20 * 1.0)
    assert math.isclose(rows["nlp"].waste_cost, 10 * 1.0)
    assert math.isclose(rows[NO_VALUE].allocated_gpu_seconds, 2 * 4 * 3600)
    assert math.isclose(rows[NO_VALUE].waste_gpu_seconds[WasteCause.LOW_EFFICIENCY], 4 * 3600)
    total = totals(rows.values())
    assert total.jobs == 3
    assert math.isclose(
        total.lost_gpu_seconds, total.allocated_gpu_seconds - total.useful_gpu_seconds
    )
    assert math.isclose(total.useful_ratio or 0, 0.5)
    users = {r.key for r in chargeback(charged, november, by=GroupBy.USER, rates=RATES)}
    assert users == {"alice", "bob"}


def test_trend_has_a_row_per_month_for_every_group() -> None:
    jobs = [
        job("1", start=datetime(2026, 10, 2), hours=10),
        job("2", start=datetime(2026, 11, 3), hours=10, account="nlp"),
    ]
    months = months_ending(parse_period("2026-11"), 3)
    series = trend(charge_jobs(jobs), months, by=GroupBy.ACCOUNT, rates=RATES)
    assert [r.jobs for r in series["vision"]] == [0, 1, 0]
    assert [r.jobs for r in series["nlp"]] == [0, 0, 1]


@settings(max_examples=100, deadline=None)
@given(
    starts=st.lists(st.integers(0, 90 * 24), min_size=1, max_size=20),
    hours=st.floats(0.1, 24 * 40),
    sm=st.floats(0, 1),
)
def test_months_sum_to_the_quarter(starts: list[int], hours: float, sm: float) -> None:
    """Splitting by time loses and invents nothing: months add up to the period holding them."""
    jobs = [
        job(str(i), start=datetime(2026, 7, 1) + timedelta(hours=h), hours=hours, sm=sm)
        for i, h in enumerate(starts)
    ]
    charged = charge_jobs(jobs)
    whole = totals(
        chargeback(charged, parse_period("2026-07-01..2027-12-31"), by=GroupBy.USER, rates=RATES)
    )
    months = months_ending(parse_period("2027-12"), 18)
    parts = [totals(chargeback(charged, m, by=GroupBy.USER, rates=RATES)) for m in months]
    for name in ("allocated_gpu_seconds", "useful_gpu_seconds", "lost_gpu_seconds", "cost"):
        split = sum(getattr(p, name) for p in parts)
        assert math.isclose(split, getattr(whole, name), rel_tol=1e-9, abs_tol=1e-6), name
