"""Warn-then-cancel transitions: warn first, cancel only after the grace and only if still
idle, clear when the job works again or ends."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.notify.cancel import CancelAction, CancelPhase, CancelRecord, cancel_step

T0 = datetime(2026, 12, 1, 12, 0)
WARNED = CancelRecord("7", "idle-allocation", CancelPhase.WARNED, T0)


def step(
    record: CancelRecord | None, *, idle: bool, running: bool = True, after: float = 0
) -> CancelAction:
    now = T0 + timedelta(seconds=after)
    return cancel_step(record, idle_now=idle, running=running, now=now, grace_seconds=600)


def test_the_path_to_a_cancel() -> None:
    assert step(None, idle=True) is CancelAction.WARN
    assert step(WARNED, idle=True, after=599) is CancelAction.WAIT
    assert step(WARNED, idle=True, after=600) is CancelAction.CANCEL


def test_work_or_an_end_clears_the_warning() -> None:
    assert step(WARNED, idle=False, after=700) is CancelAction.CLEAR
    assert step(WARNED, idle=True, running=False, after=700) is CancelAction.CLEAR


def test_a_cleared_job_is_warned_again_and_a_cancelled_one_left_alone() -> None:
    cleared = CancelRecord("7", "idle-allocation", CancelPhase.CLEARED, T0, T0)
    assert step(cleared, idle=True) is CancelAction.WARN
    cancelled = CancelRecord("7", "idle-allocation", CancelPhase.CANCELLED, T0, T0)
    assert step(cancelled, idle=True, after=10_000) is CancelAction.NOTHING
    assert step(None, idle=False) is CancelAction.NOTHING


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 2000)), max_size=20))
def test_never_cancelled_without_a_warning_a_grace_ago(checks: list[tuple[bool, float]]) -> None:
    record: CancelRecord | None = None
    clock = 0.0
    for idle, advance in checks:
        clock += advance
        now = T0 + timedelta(seconds=clock)
        action = cancel_step(record, idle_now=idle, running=True, now=now, grace_seconds=600)
        if action is CancelAction.CANCEL:
            assert record is not None and record.phase is CancelPhase.WARNED and idle
            assert (now - record.warned_at).total_seconds() >= 600
            record = CancelRecord("7", "r", CancelPhase.CANCELLED, record.warned_at, now)
        elif action is CancelAction.WARN:
            record = CancelRecord("7", "r", CancelPhase.WARNED, now)
        elif action is CancelAction.CLEAR:
            assert record is not None
            record = CancelRecord("7", "r", CancelPhase.CLEARED, record.warned_at, now)
