"""SLO events from job records: when a job is good or bad, and when it counts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.slo.budget import WORKBOOK_PAIRS
from hpcscope.analysis.slo.events import (
    EventWindows,
    causes,
    efficiency_events,
    history,
    queue_wait_events,
    slo_status,
    success_events,
    wait_percentiles,
    window_sums,
)

NOW = datetime(2026, 10, 2, 12, 0)
H = timedelta(hours=1)
SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "job_id": pl.String, "user": pl.String, "account": pl.String, "partition": pl.String,
    "qos": pl.String, "submit_time": pl.Datetime("us"), "start_time": pl.Datetime("us"),
    "end_time": pl.Datetime("us"), "exit_cause": pl.String, "useful_gpu_seconds": pl.Float64,
    "allocated_gpu_seconds": pl.Float64,
}  # fmt: skip


def _jobs(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = dict.fromkeys(SCHEMA) | {"user": "u", "account": "a", "partition": "gpu",
                                         "qos": "normal"}  # fmt: skip
    return pl.DataFrame([base | r for r in rows], schema=SCHEMA)


def test_queue_wait_events_are_known_when_they_happen() -> None:
    jobs = _jobs([
        {"job_id": "fast", "submit_time": NOW - 5 * H, "start_time": NOW - 5 * H + H / 4},
        {"job_id": "late", "submit_time": NOW - 5 * H, "start_time": NOW - 2 * H},
        {"job_id": "stuck", "submit_time": NOW - 3 * H},
        {"job_id": "young", "submit_time": NOW - H / 2},
        {"job_id": "gave-up", "submit_time": NOW - 5 * H, "end_time": NOW - 3 * H,
         "exit_cause": "cancelled"},
        {"job_id": "quit-early", "submit_time": NOW - 5 * H, "end_time": NOW - 5 * H + H / 2,
         "exit_cause": "cancelled"},
    ])  # fmt: skip
    events = queue_wait_events(jobs, threshold_seconds=3600, now=NOW).sort("job_id")
    got = {r["job_id"]: (r["event_time"], r["good"]) for r in events.iter_rows(named=True)}
    assert got == {
        "fast": (NOW - 5 * H + H / 4, 1.0),
        "late": (NOW - 4 * H, 0.0),  # bad from submit + 1 h, before it started
        "stuck": (NOW - 2 * H, 0.0),
        "gave-up": (NOW - 4 * H, 0.0),
    }
    waits = dict(zip(events["job_id"], events["wait_seconds"], strict=True))
    assert waits["fast"] == 900 and waits["late"] == 3 * 3600 and waits["stuck"] is None


def test_success_and_efficiency_events() -> None:
    jobs = _jobs([
        {"job_id": "ok", "end_time": NOW - H, "exit_cause": "success",
         "useful_gpu_seconds": 30.0, "allocated_gpu_seconds": 100.0},
        {"job_id": "oom", "end_time": NOW - H, "exit_cause": "user_error"},
        {"job_id": "xid", "end_time": NOW - H, "exit_cause": "node_failure_xid",
         "useful_gpu_seconds": 500.0, "allocated_gpu_seconds": 400.0},
        {"job_id": "bye", "end_time": NOW - H, "exit_cause": "cancelled"},
        {"job_id": "running", "start_time": NOW - H},
    ])  # fmt: skip
    success = success_events(jobs)
    assert sorted(success["job_id"]) == ["ok", "oom", "xid"]
    assert window_sums(success, start=NOW - 2 * H, end=NOW) == (1.0, 3.0)
    efficiency = efficiency_events(jobs)
    # useful is capped at allocated: an over-count never makes a job better than perfect
    assert window_sums(efficiency, start=NOW - 2 * H, end=NOW) == (430.0, 500.0)
    assert causes(jobs, start=NOW - 2 * H, end=NOW) == {
        "cancelled": 1, "node_failure_xid": 1, "success": 1, "user_error": 1,
    }  # fmt: skip


def _bad_hour_events() -> pl.DataFrame:
    """Six good hours (10 jobs a minute, all good), then an hour of 8 failures in 10."""
    rows = []
    for minute in range(7 * 60):
        at = NOW - timedelta(minutes=7 * 60 - minute - 1)
        bad = 8 if minute >= 6 * 60 else 0
        for i in range(10):
            rows.append({"job_id": f"{minute}-{i}", "end_time": at,
                         "exit_cause": "user_error" if i < bad else "success"})  # fmt: skip
    return success_events(_jobs(rows))


def test_a_bad_hour_pages_and_does_not_ticket() -> None:
    events = _bad_hour_events()
    status = slo_status(
        events, now=NOW, objective_ratio=0.95, window_seconds=30 * 86400, pairs=WORKBOOK_PAIRS
    )
    assert status.burn(3600) == pytest.approx(16.0) and status.burn(300) == pytest.approx(16.0)
    assert status.burn(21600) == pytest.approx(0.8 * 60 / 360 / 0.05)
    assert [p.name for p in status.firing] == ["page"]
    half = slo_status(
        events, now=NOW - H / 2, objective_ratio=0.95, window_seconds=30 * 86400,
        pairs=WORKBOOK_PAIRS,
    )  # fmt: skip
    assert half.burn(3600) == pytest.approx(8.0) and half.firing == ()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 72 * 60), st.booleans()), max_size=60))
def test_history_buckets_add_up_to_the_window(events_spec: list[tuple[int, bool]]) -> None:
    rows = [
        {"job_id": str(i), "end_time": NOW - timedelta(minutes=m),
         "exit_cause": "success" if ok else "timeout"}
        for i, (m, ok) in enumerate(events_spec)
    ]  # fmt: skip
    events = success_events(_jobs(rows))
    days = history(events, start=NOW - 3 * 24 * H, end=NOW, bucket_seconds=86400)
    assert days.height == 3
    good, total = window_sums(events, start=NOW - 3 * 24 * H, end=NOW)
    assert days["good"].sum() == good and days["total"].sum() == total


_EVENT = st.tuples(
    st.one_of(st.none(), st.integers(-3 * 3_600_000_000, 3 * 3_600_000_000)),
    st.one_of(st.none(), st.floats(0, 1e6)),
    st.one_of(st.none(), st.floats(0, 1e6)),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_EVENT, max_size=40),
    st.integers(-4 * 3_600_000_000, 4 * 3_600_000_000),
    st.integers(0, 8 * 3_600_000_000),
)
def test_window_sums_are_the_filtered_frames_sums(
    spec: list[tuple[int | None, float | None, float | None]], start_us: int, length_us: int
) -> None:
    # the sorted arrays' binary search against the plain filter: ``start < t <= end``, events
    # without a time in no window, a null good or total adding nothing, the frame's order
    # whatever it was (microsecond times: a window may end on an event's instant)
    events = pl.DataFrame(
        [
            {"job_id": str(i), "event_time": None if t is None else NOW + timedelta(microseconds=t),
             "good": g, "total": v}
            for i, (t, g, v) in enumerate(spec)
        ],
        schema={"job_id": pl.String, "event_time": pl.Datetime("us"), "good": pl.Float64,
                "total": pl.Float64},
    )  # fmt: skip
    start = NOW + timedelta(microseconds=start_us)
    windows = [(start, start + timedelta(microseconds=length_us))]
    # windows that end, and windows that start, on an event's instant
    windows += [(NOW + timedelta(microseconds=t) - H, NOW + timedelta(microseconds=t))
                for t, _, _ in spec if t is not None]  # fmt: skip
    windows += [(NOW + timedelta(microseconds=t), NOW + timedelta(microseconds=t) + H)
                for t, _, _ in spec if t is not None]  # fmt: skip
    index = EventWindows.of(events)
    for begin, end in windows:
        inside = events.filter((pl.col("event_time") > begin) & (pl.col("event_time") <= end))
        good, total = index.sums(start=begin, end=end)
        assert good == pytest.approx(float(inside["good"].sum()), rel=1e-12, abs=1e-9)
        assert total == pytest.approx(float(inside["total"].sum()), rel=1e-12, abs=1e-9)
        assert window_sums(events, start=begin, end=end) == (good, total)


def test_wait_percentiles_interpolate_linearly() -> None:
    jobs = _jobs([
        {"job_id": str(w), "submit_time": NOW - 10 * H, "start_time": NOW - 10 * H
         + timedelta(seconds=w), "qos": "high" if w > 100 else "normal"}
        for w in (10, 20, 30, 40, 200, 400)
    ])  # fmt: skip
    events = queue_wait_events(jobs, threshold_seconds=3600, now=NOW)
    got = wait_percentiles(events, start=NOW - 24 * H, end=NOW, by=("partition", "qos"))
    rows = {r["qos"]: r for r in got.iter_rows(named=True)}
    assert rows["normal"]["jobs"] == 4
    assert rows["normal"]["p50_wait_seconds"] == pytest.approx(25.0)
    assert rows["normal"]["p95_wait_seconds"] == pytest.approx(38.5)
    assert rows["high"]["p50_wait_seconds"] == pytest.approx(300.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 48 * 60),  # submitted this many minutes before NOW
            st.one_of(st.none(), st.integers(0, 6 * 60)),  # waited this many minutes to start
            st.one_of(st.none(), st.integers(0, 6 * 60)),  # cancelled after this many minutes
        ),
        max_size=40,
    ),
    st.integers(1, 180),
)
def test_queue_wait_events_agree_with_a_plain_reading(
    spec: list[tuple[int, int | None, int | None]], threshold_minutes: int
) -> None:
    rows, expected = [], []
    for i, (ago, wait, cancel) in enumerate(spec):
        submit = NOW - timedelta(minutes=ago)
        start = None if wait is None else submit + timedelta(minutes=wait)
        if start is not None and start > NOW:
            start = None  # not started yet
        end = None if start is not None or cancel is None else submit + timedelta(minutes=cancel)
        if end is not None and end > NOW:
            end = None
        rows.append({"job_id": str(i), "submit_time": submit, "start_time": start,
                     "end_time": end})  # fmt: skip
        waited = ((start or end or NOW) - submit).total_seconds() / 60
        if start is not None and waited <= threshold_minutes:
            expected.append((str(i), start, 1.0))
        elif waited > threshold_minutes:
            expected.append((str(i), submit + timedelta(minutes=threshold_minutes), 0.0))
    events = queue_wait_events(_jobs(rows), threshold_seconds=threshold_minutes * 60, now=NOW)
    got = sorted(zip(events["job_id"], events["event_time"], events["good"], strict=True))
    assert got == sorted(expected)
