"""Entries kept ahead of their readers (``Snapshots.keep_ahead``): recomputed before they are
due while they are read, in the keeper's thread, never through the refresh threads' queue."""

from __future__ import annotations

import pytest

from hpcscope.service.snapshots import AHEAD_IDLE_SECONDS, Snapshots


def _snapshots(now: list[float]) -> tuple[Snapshots, list[object]]:
    queued: list[object] = []  # the refresh threads' queue, never run here
    snapshots = Snapshots(lambda: 0, clock=lambda: now[0], refresh=queued.append)
    snapshots.publish()
    return snapshots, queued


def test_an_entry_read_ahead_is_recomputed_before_it_is_due_while_it_is_read() -> None:
    now = [0.0]
    snapshots, queued = _snapshots(now)
    computed: list[float] = []

    def report() -> int:
        computed.append(now[0])
        return len(computed)

    assert snapshots.get("slo", report, every_seconds=15.0, ahead=True) == 1
    now[0] = 5.0
    assert snapshots.keep_ahead(lead_seconds=7.0) == 0  # due at 15, kept ahead from 8
    now[0] = 9.0
    assert snapshots.keep_ahead(lead_seconds=7.0) == 1
    now[0] = 23.0  # 14 s after the keeper's computation: current, nothing queued
    assert snapshots.get("slo", report, every_seconds=15.0, ahead=True) == 2
    assert queued == [] and computed == [0.0, 9.0]
    now[0] += AHEAD_IDLE_SECONDS + 1  # no longer read: no longer kept ahead
    assert snapshots.keep_ahead(lead_seconds=7.0) == 0


def test_an_entry_read_without_ahead_is_left_to_the_refresh_threads() -> None:
    now = [0.0]
    snapshots, queued = _snapshots(now)
    assert snapshots.get("chargeback", lambda: 1, every_seconds=15.0) == 1
    now[0] = 14.0
    assert snapshots.keep_ahead(lead_seconds=7.0) == 0
    now[0] = 16.0  # past due: served stale while one refresh is queued
    assert snapshots.get("chargeback", lambda: 2, every_seconds=15.0) == 1
    assert len(queued) == 1


def test_a_failed_computation_ahead_keeps_the_value_and_is_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    snapshots, _ = _snapshots(now)
    fail = [True]

    def report() -> int:
        if fail[0] and now[0] > 0:
            raise RuntimeError("the store went away")
        return int(now[0])

    assert snapshots.get("slo", report, every_seconds=15.0, ahead=True) == 0
    now[0] = 10.0
    assert snapshots.keep_ahead(lead_seconds=7.0) == 0
    assert "keeping the snapshot 'slo' ahead failed" in caplog.text
    assert snapshots.get("slo", report, every_seconds=15.0, ahead=True) == 0
    fail[0] = False
    assert snapshots.keep_ahead(lead_seconds=7.0) == 1
    assert snapshots.get("slo", report, every_seconds=15.0, ahead=True) == 10
