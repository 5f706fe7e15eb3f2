"""The collector's status line: once per period, with rates over the period (fake clock)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.service.collect.status import CollectorStatus, StatusLog, format_status


class FakeClock:
    def __init__(self) -> None:
        self.now_seconds = 1000.0

    def __call__(self) -> float:
        return self.now_seconds


def test_one_status_a_minute_with_the_rate_over_the_minute() -> None:
    clock = FakeClock()
    status_log = StatusLog(lambda: 5 * 2**20, clock=clock)
    statuses: list[CollectorStatus] = []
    for _ in range(90):  # three minutes of 2-second cycles
        clock.now_seconds += 2.0
        status = status_log.observe(targets=4, ok=3, samples=16)
        if status is not None:
            statuses.append(status)
    assert len(statuses) == 3
    first = statuses[0]
    assert (first.targets_up, first.targets_down, first.cycles) == (3, 1, 30)
    assert first.samples_per_second == pytest.approx(8.0)  # 16 samples every 2 s
    assert first.period_seconds == pytest.approx(60.0)
    assert first.store_bytes == 5 * 2**20


@given(
    st.lists(st.floats(min_value=0.01, max_value=30.0), min_size=1, max_size=400),
    st.floats(min_value=1.0, max_value=120.0),
)
def test_never_more_than_one_status_per_period(steps: list[float], period: float) -> None:
    clock = FakeClock()
    status_log = StatusLog(lambda: 0, period_seconds=period, clock=clock)
    start = clock.now_seconds
    emitted = 0
    for step in steps:
        clock.now_seconds += step
        if status_log.observe(targets=1, ok=1, samples=1) is not None:
            emitted += 1
    assert emitted <= (clock.now_seconds - start) / period


def test_the_status_line_names_targets_rate_and_store_size() -> None:
    line = format_status(
        CollectorStatus(
            targets_up=4,
            targets_down=1,
            samples_per_second=1280.4,
            store_bytes=3 * 2**20,
            period_seconds=60.0,
            cycles=30,
        )
    )
    assert line == (
        "collector: 4 targets up, 1 down, 1,280 samples/s, store 3.0 MiB (30 cycles in 60 s)"
    )


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="period_seconds"):
        StatusLog(lambda: 0, period_seconds=0)
