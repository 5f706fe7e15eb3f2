"""The twin's jobs make the SLOs non-trivial: queue waits past an hour, and failures of every
cause the success SLO splits (user error, Xid, timeout), in two QOS."""

from __future__ import annotations

from pathlib import Path

from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.scheduler import JobState, Scheduler

TOPOLOGY = load_topology(bundled_topology())
T0 = 1.7e9


def test_a_simulated_day_moves_every_slo(tmp_path: Path) -> None:
    scheduler = Scheduler(TOPOLOGY, tmp_path, start_time=T0, seed=42)
    scheduler.submit_demo_scenario()
    for step in range(0, 24 * 3600, 60):
        scheduler.tick(T0 + step)
    jobs = list(scheduler.jobs.values())
    waits = [j.start_time - j.submit_time for j in jobs if j.start_time is not None]
    assert max(waits) > 3600 and min(waits) < 60
    ended = [j for j in jobs if j.end_time is not None]
    user_errors = [j for j in ended if j.state is JobState.FAILED and j.xid is None]
    xid_failures = [j for j in ended if j.state is JobState.FAILED and j.xid is not None]
    timeouts = [j for j in ended if j.state is JobState.TIMEOUT]
    completed = [j for j in ended if j.state is JobState.COMPLETED]
    assert user_errors and xid_failures and timeouts
    assert all(j.exit_code == 1 for j in user_errors)
    assert len(completed) > len(ended) / 2
    assert {j.qos for j in jobs} == {"normal", "high"}
    # a user error frees its GPUs (no Xid, nothing to repair)
    assert not any(scheduler.failing_gpu(j) for j in user_errors)
