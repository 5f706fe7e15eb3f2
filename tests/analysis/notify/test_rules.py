"""Notification rules over the recent minutes: each kind holds only for the whole window,
never on a collection gap, a partial minute or a job that is not running."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.notify.facts import GpuFacts, GpuMinute, JobFacts
from hpcscope.analysis.notify.rules import NotifyRule, RuleKind, evaluate_rule, evaluate_rules

NOW = datetime(2026, 12, 1, 12, 0, 30)
IDLE = NotifyRule("idle-allocation", RuleKind.ZERO_ACTIVITY, "idle", below_ratio=0.01,
                  for_minutes=10, cancel=True)  # fmt: skip
LOW = NotifyRule("low-efficiency", RuleKind.LOW_REAL_EFFICIENCY, "low", below_ratio=0.2,
                 for_minutes=10)  # fmt: skip
SOME = NotifyRule("over-requested-gpus", RuleKind.IDLE_GPUS, "some", below_ratio=0.05,
                  for_minutes=10)  # fmt: skip
XID = NotifyRule("xid-failure", RuleKind.FAILED_WITH_XID, "xid")


def minutes(
    per_gpu: list[tuple[float, float]], count: int = 10, skip: frozenset[int] = frozenset()
) -> tuple[GpuMinute, ...]:
    current = NOW.replace(second=0)
    return tuple(
        GpuMinute(current - timedelta(minutes=m), "gpu01", g, sm, util)
        for m in range(1, count + 1)
        if m not in skip
        for g, (sm, util) in enumerate(per_gpu)
    )


def job(rows: tuple[GpuMinute, ...], *, state: str = "RUNNING", elapsed: float = 3600,
        gpus: tuple[GpuFacts, ...] = ()) -> JobFacts:  # fmt: skip
    return JobFacts("7", "alice", "vision", state, elapsed, 2, None, None, gpus, minutes=rows)


def test_zero_activity_holds_over_the_whole_window_and_asks_for_cancel() -> None:
    found = evaluate_rule(job(minutes([(0.0, 0.0), (0.0, 0.0)])), IDLE, now=NOW)
    assert found is not None and found.cancel
    assert found.summary == (
        "The 2 GPU(s) of job 7 did nothing for the last 10 min (SM active and utilization at "
        "or under 1 %)."
    )


def test_one_active_minute_breaks_zero_activity() -> None:
    rows = list(minutes([(0.0, 0.0), (0.0, 0.0)]))
    rows[3] = GpuMinute(rows[3].minute, "gpu01", 0, 0.4, 0.9)
    assert evaluate_rule(job(tuple(rows)), IDLE, now=NOW) is None


def test_the_current_partial_minute_is_left_out() -> None:
    current = GpuMinute(NOW.replace(second=0), "gpu01", 0, 0.9, 0.9)
    rows = (*minutes([(0.0, 0.0)]), current)
    assert evaluate_rule(job(rows), IDLE, now=NOW) is not None


def test_a_collection_gap_is_not_idleness() -> None:
    rows = minutes([(0.0, 0.0)], skip=frozenset({2, 3, 4, 5}))  # 6 of 10 minutes: under 80 %
    assert evaluate_rule(job(rows), IDLE, now=NOW) is None
    rows = minutes([(0.0, 0.0)], skip=frozenset({2, 3}))  # 8 of 10
    assert evaluate_rule(job(rows), IDLE, now=NOW) is not None


def test_only_running_jobs_that_ran_the_window() -> None:
    rows = minutes([(0.0, 0.0)])
    assert evaluate_rule(job(rows, state="COMPLETED"), IDLE, now=NOW) is None
    assert evaluate_rule(job(rows, elapsed=300), IDLE, now=NOW) is None


def test_low_real_efficiency_every_minute() -> None:
    assert evaluate_rule(job(minutes([(0.1, 0.9), (0.15, 0.95)])), LOW, now=NOW) is not None
    assert evaluate_rule(job(minutes([(0.1, 0.9), (0.35, 0.95)])), LOW, now=NOW) is None


def test_idle_gpus_needs_a_working_peer() -> None:
    assert evaluate_rule(job(minutes([(0.8, 0.9), (0.0, 0.0)])), SOME, now=NOW) is not None
    assert evaluate_rule(job(minutes([(0.0, 0.0), (0.0, 0.0)])), SOME, now=NOW) is None


def test_failed_with_xid() -> None:
    bad = (GpuFacts("gpu01", 0, "xid_error", 0.5, 0.9, xid=79),)
    assert evaluate_rule(job((), state="FAILED", gpus=bad), XID, now=NOW) is not None
    assert evaluate_rule(job((), state="COMPLETED", gpus=bad), XID, now=NOW) is None


def test_a_disabled_rule_never_holds() -> None:
    off = NotifyRule("idle-allocation", RuleKind.ZERO_ACTIVITY, "idle", enabled=False)
    assert evaluate_rules([job(minutes([(0.0, 0.0)]))], [off], now=NOW) == []


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=10, max_size=10),
       st.floats(0, 0.5))  # fmt: skip
def test_zero_activity_agrees_with_its_definition(
    per_minute: list[tuple[float, float]], below: float
) -> None:
    current = NOW.replace(second=0)
    rows = tuple(
        GpuMinute(current - timedelta(minutes=m + 1), "gpu01", 0, sm, util)
        for m, (sm, util) in enumerate(per_minute)
    )
    rule = NotifyRule("r", RuleKind.ZERO_ACTIVITY, "t", below_ratio=below, for_minutes=10)
    expected = all(sm <= below and util <= below for sm, util in per_minute)
    assert (evaluate_rule(job(rows), rule, now=NOW) is not None) == expected
