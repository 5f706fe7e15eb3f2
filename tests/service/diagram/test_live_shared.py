"""The diagram's live state with its viewer-independent parts shared across viewers (issue 17).

With the service's snapshots, the silent GPUs' last sample times, every job's recent verdicts,
the collectors' health and the open-alert counts are computed once per generation for all
viewers. A viewer's state must be exactly what it is without sharing, whoever filled the
shared parts first.
"""

from __future__ import annotations

from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import GpuState, Viewer, live_state
from tests.support.fleet import write_fleet


def _viewer(service: Service, name: str | None) -> Viewer:
    return Viewer(service.principal(name) if name is not None else None)


def test_a_shared_state_is_the_viewers_own_whoever_came_first(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    now = utcnow()
    admin = live_state(service, _viewer(service, "admin"), now=now, shared=service.snapshots)
    assert any(g.verdict for g in admin.gpus.values())  # every job's verdicts now shared
    for name in ("alice", "bob", "carol", None):
        viewer = _viewer(service, name)
        shared = live_state(service, viewer, now=now, shared=service.snapshots)
        assert shared == live_state(service, viewer, now=now)


def test_a_researcher_gets_no_verdict_on_another_users_gpu(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    now = utcnow()
    live_state(service, _viewer(service, "admin"), now=now, shared=service.snapshots)
    alice = live_state(service, _viewer(service, "alice"), now=now, shared=service.snapshots)
    others = [g for g in alice.gpus.values() if g.state is not GpuState.ACTIVE]
    assert others and all(g.verdict is None and not g.job_ids for g in others)
    assert {j for g in alice.gpus.values() for j in g.job_ids} == {"4410001"}
