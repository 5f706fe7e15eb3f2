"""The diagram's live state with its viewer-independent parts shared across viewers (issue 17).

With the service's snapshots, the silent GPUs' last sample times, every job's recent verdicts,
the collectors' health and the open-alert counts are computed once per generation for all
viewers. A viewer's state must be exactly what it is without sharing, whoever filled the
shared parts first.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from hpcscope.model.alerts import VECTOR_NAMES, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import alert_summary, read_owners
from hpcscope.service.diagram.live import GpuState, Viewer, live_state
from hpcscope.service.snapshots import SnapshotMiss, cache_only
from hpcscope.service.source_settings import FalcoSection
from hpcscope.store import alerts as alert_store
from tests.support.alerts import open_escape_alert
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


def test_new_alert_counts_are_counted_on_the_event_loop_not_missed(service: Service) -> None:
    """With the alerts in memory (the store's index), a poll that finds the counts changed
    counts them where it runs, the read lane's event loop, instead of missing and going to a
    worker thread: ~4 changes a second at 128 nodes made every viewer's poll miss."""
    service.settings = service.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    write_fleet(service.store, now=utcnow())
    node = service.topology.nodes[0].name
    for name in ("admin", "alice"):
        viewer = _viewer(service, name)
        alert_summary(service, viewer, shared=service.snapshots)  # kept
        for opened in range(1, 4):
            open_escape_alert(service.store, node=node, subject=f"{name} pid {opened}")
            on_loop = cache_only(alert_summary, service, viewer, shared=service.snapshots)
            assert on_loop == alert_summary(service, viewer)  # what the store's query counts
    admin_counts = alert_summary(service, _viewer(service, "admin"), shared=service.snapshots)
    assert admin_counts.by_vector[VECTOR_NAMES[Vector.CONTAINER_ESCAPE]] == 6
    costs = service.snapshots.costs.snapshot()
    assert costs["diagram.alert_summary"].misses == 0
    assert costs["diagram.alert_counts"].misses == 0


def test_counts_wait_for_the_jobs_owners_off_the_event_loop(service: Service) -> None:
    """A write other than an alert's (a job's record) may change who owns the jobs with
    alerts: reading them again is a query, which the event loop never runs (29 ms each at 128
    nodes). The poll misses instead, until the collector's after-cycle read of the owners
    (:func:`read_owners`); then the counts are the loop's again, and the store's."""
    service.settings = service.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    write_fleet(service.store, now=utcnow())
    node = service.topology.nodes[0].name
    viewer = _viewer(service, "alice")
    open_escape_alert(service.store, node=node, subject="alice pid 1")
    alert_summary(service, viewer, shared=service.snapshots)  # kept, owners read
    jobs = pa.table(
        {"job_id": ["4410999"], "user": ["alice"], "account": ["nlp"], "source": ["test"]}
    )
    service.store.upsert_jobs(jobs).result()  # a write other than an alert's
    on_job = replace(open_escape_alert(service.store, node=node, subject="x"), job_id="4410001")
    alert_store.upsert_alerts(service.store, [replace(on_job, subject="alice pid 2")]).result()
    with pytest.raises(SnapshotMiss):
        cache_only(alert_summary, service, viewer, shared=service.snapshots)
    read_owners(service)  # the collector's hook, before it publishes the cycle
    on_loop = cache_only(alert_summary, service, viewer, shared=service.snapshots)
    assert on_loop == alert_summary(service, viewer)


def test_once_cycles_are_published_counts_take_the_owners_as_the_cycle_read_them(
    service: Service,
) -> None:
    """With a collector publishing its cycles, the writes between two cycles (many a second)
    never make the event loop's count of the open alerts read the owners again: a job's
    first alert since counts as nobody's (an admin counts it, its owner not yet) until the
    cycle's end reads them (:func:`read_owners`); then the counts are the store's."""
    service.settings = service.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    write_fleet(service.store, now=utcnow())
    node = service.topology.nodes[0].name
    open_escape_alert(service.store, node=node, subject="on the node")
    read_owners(service)
    service.snapshots.publish()
    admin, alice = _viewer(service, "admin"), _viewer(service, "alice")
    before = {v: alert_summary(service, v, shared=service.snapshots) for v in (admin, alice)}
    jobs = pa.table({"job_id": ["4410998"], "user": ["bob"], "account": ["x"], "source": ["t"]})
    service.store.upsert_jobs(jobs).result()  # a write other than an alert's
    on_job = replace(open_escape_alert(service.store, node=node, subject="y"), job_id="4410001")
    alert_store.upsert_alerts(service.store, [replace(on_job, subject="alice pid 3")]).result()
    for viewer in (admin, alice):  # on the loop: no miss, no query
        now = cache_only(alert_summary, service, viewer, shared=service.snapshots)
        grown = 2 if viewer is admin else 0  # "y" on the node, and the job's nobody's yet
        assert now.total == before[viewer].total + grown
    read_owners(service)
    service.snapshots.publish()
    for viewer in (admin, alice):
        now = cache_only(alert_summary, service, viewer, shared=service.snapshots)
        assert now == alert_summary(service, viewer)  # the store's query
    assert cache_only(alert_summary, service, alice, shared=service.snapshots).total == (
        before[alice].total + 1
    )
