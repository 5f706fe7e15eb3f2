"""Job reports served from the read snapshots: scope isolation and invalidation (issue 17).

The service computes the job list once per job scope and generation, and one job's report once
per job and generation after checking the caller may see it. These tests read through the
real store and count the computations (``Snapshots.computations``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from hpcscope.model.access import Principal, Role
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.snapshots import Snapshots
from hpcscope.store.alerts import upsert_alerts
from tests.support.fleet import write_fleet


def _principal(service: Service, name: str) -> Principal:
    principal = service.principal(name)
    assert principal is not None
    return principal


def test_a_researcher_never_gets_a_report_cached_for_an_admin(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    admin, alice = _principal(service, "admin"), _principal(service, "alice")
    bobs = service.job_report(admin, "4410002")  # bob's job, now in the snapshot
    assert bobs is not None and bobs.user == "bob"
    assert service.job_report(alice, "4410002") is None
    assert not service.can_see_job(alice, "4410002")
    assert "4410002" in {r.job_id for r in service.job_reports(admin)}
    assert {r.user for r in service.job_reports(alice)} == {"alice"}
    # and the other way round: alice's list first, then the admin's is not alice's
    assert len(service.job_reports(admin)) > len(service.job_reports(alice))


def test_principals_of_one_scope_share_one_list_others_get_their_own(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    alice = _principal(service, "alice")
    same = Principal(name="alice", role=Role.RESEARCHER, via="token")  # another session
    carol = _principal(service, "carol")  # team lead of vision and nlp
    before = service.snapshots.computations
    mine = service.job_reports(alice)
    assert service.job_reports(same) == mine
    # alice's list, and the list of every job it takes its running jobs from
    assert service.snapshots.computations == before + 2
    theirs = service.job_reports(carol)
    assert service.snapshots.computations == before + 3
    assert {r.user for r in theirs} == {"alice", "bob"}


def test_a_write_is_in_the_next_read(service: Service) -> None:
    admin = _principal(service, "admin")
    assert service.job_reports(admin) == []
    assert service.job_report(admin, "4410001") is None
    write_fleet(service.store, now=utcnow())
    assert "4410001" in {r.job_id for r in service.job_reports(admin)}
    assert service.job_report(admin, "4410001") is not None


def test_an_explicit_now_reads_past_the_snapshots(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    admin = _principal(service, "admin")
    service.job_reports(admin)
    before = service.snapshots.computations
    later = utcnow()
    assert service.job_reports(admin, now=later)
    assert service.job_report(admin, "4410001", now=later) is not None
    assert service.snapshots.computations == before


def test_with_a_collector_a_new_cycle_is_served_once_refreshed(service: Service) -> None:
    held: list[Callable[[], None]] = []
    store = service.store
    service.snapshots = Snapshots(
        lambda: store.writes_committed, refresh=held.append, min_refresh_seconds=0.0
    )
    admin = _principal(service, "admin")
    service.snapshots.publish()
    assert service.job_reports(admin) == []
    write_fleet(service.store, now=utcnow())
    assert service.job_reports(admin) == []  # the cycle is not over
    service.snapshots.publish()
    assert service.job_reports(admin) == []  # served stale once, refreshed behind
    for job in held:
        job()
    assert "4410001" in {r.job_id for r in service.job_reports(admin)}


def test_an_acknowledgement_shows_on_the_next_read_within_a_cycle(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    now = utcnow()
    alert = Alert(
        rule_id="SC-2",
        vector=Vector.SUPPLY_CHAIN,
        severity=Severity.CRITICAL,
        title="SC-2 on 4410001",
        first_seen=now - timedelta(minutes=2),
        last_seen=now,
        node="gpu01",
        job_id="4410001",
        subject="/tmp/payload",
        evidence=(Evidence("exec of /tmp/payload", "falco.json", "line 3"),),
    )
    upsert_alerts(service.store, [alert]).result()
    service.snapshots.publish()  # as the collector does: stale answers may be served now
    alice, bob = _principal(service, "alice"), _principal(service, "bob")
    (seen,) = service.job_alerts(alice, "4410001") or []
    assert seen.state is AlertState.OPEN
    assert service.job_alerts(bob, "4410001") is None  # not bob's job, cached or not
    service.set_alert_state(alice, seen.key, AlertState.ACKNOWLEDGED)
    (after,) = service.job_alerts(alice, "4410001") or []
    assert after.state is AlertState.ACKNOWLEDGED


def test_a_job_opened_from_the_list_computes_no_check_and_no_report(service: Service) -> None:
    """The list hands each listed job's report to the snapshots, and visibility is read from
    the owner index: a page opened from the list computes neither report nor check, and no
    scope checks a job on its own (one index for everyone)."""
    write_fleet(service.store, now=utcnow())
    alice, bob = _principal(service, "alice"), _principal(service, "bob")
    listed = {r.job_id: r for r in service.job_reports(alice)}
    before = service.snapshots.computations
    for job_id, report in listed.items():
        job = service.visible_job(alice, job_id)
        assert job is not None and service.report_of(job) == report
    assert service.snapshots.computations == before + 1  # the owner index, once
    assert all(service.visible_job(bob, job_id) is None for job_id in listed)
    assert service.snapshots.computations == before + 1
    assert service.visible_job(alice, "no-such-job") is None  # not in the index: checked
    assert service.snapshots.computations == before + 2
