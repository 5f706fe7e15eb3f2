"""A job's page and document: rendered once per job, plus each reader's header and alerts
(``serve/job_view.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import Principal, Role
from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.job_view import ViewKeeper, view_kind_of
from hpcscope.service.alerts import access as alert_access
from hpcscope.service.alerts.contracts import JobReportWithAlerts
from hpcscope.service.core import Service
from hpcscope.service.jobs.contracts import JobReportDocument
from hpcscope.service.jobs.views import store_views
from hpcscope.service.notify.access import notes_of_report
from hpcscope.service.notify.contracts import JobNotesDocument
from hpcscope.service.traces.capture_contracts import JobReportWithPhases
from hpcscope.service.traces.job_phases import phases_of
from hpcscope.store import Store
from hpcscope.store.alerts import upsert_alerts
from tests.conftest import DEMO_PASSWORDS
from tests.serve.test_job_phases import capture_job_101
from tests.store.test_cold import _job, _summarised
from tests.support.data import populate


def _alert(job_id: str, title: str) -> Alert:
    now = utcnow()
    return Alert(
        rule_id="CE-3",
        vector=Vector.CONTAINER_ESCAPE,
        severity=Severity.HIGH,
        title=title,
        first_seen=now - timedelta(minutes=1),
        last_seen=now,
        node="gpu01",
        job_id=job_id,
        subject=title,
    )


def test_the_joined_document_is_the_models_own_serialisation(
    service: Service, client_as: Callable[[str], TestClient], tmp_path: Path
) -> None:
    """The document joins the kept report and phases with the reader's alerts as bytes: the
    same bytes as the contract serialised whole, for a job with phases and alerts."""
    populate(service.store, now=utcnow())
    capture_job_101(service, tmp_path / "spool")
    upsert_alerts(service.store, [_alert("101", "nsenter"), _alert("101", "ptrace")]).result()
    body = client_as("alice").get("/api/jobs/101").content

    alice = Principal(name="alice", role=Role.RESEARCHER)
    job = service.visible_job(alice, "101")
    assert job is not None
    report = service.report_of(job)
    assert report is not None
    document = JobReportWithAlerts.of(JobReportDocument.from_report(report), service.alerts_of(job))
    whole = JobReportWithPhases.join(document, phases_of(service, job)).model_dump_json()
    assert body == whole.encode()
    assert b'"captured":true' in body and body.count(b'"rule_id":"CE-3"') == 2


def test_a_jobs_body_is_rendered_once_for_every_reader(
    service: Service, client_as: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner, their team lead and the admin read one job's page and document: its notes
    and body are computed once; each page shows its reader's name, and another user gets 404."""
    populate(service.store, now=utcnow())
    service.snapshots.publish()  # a collector's cycle: the generation holds between reads
    rendered: list[str] = []

    def counted(on: Service, report: JobReport) -> JobNotesDocument:
        rendered.append(report.job_id)
        return notes_of_report(on, report)

    monkeypatch.setattr("hpcscope.serve.job_view.notes_of_report", counted)
    pages = {}
    for user in ("alice", "carol", "admin"):
        client = client_as(user)
        pages[user] = client.get("/jobs/101").text
        assert client.get("/api/jobs/101").status_code == 200
    assert rendered == ["101"]
    for user, page in pages.items():
        assert f"{user} · " in page and "Job 101" in page
        others = set(pages) - {user}
        assert not any(f"{other} · " in page for other in others)
    assert client_as("bob").get("/jobs/101").status_code == 404
    assert client_as("bob").get("/api/jobs/101").status_code == 404


def test_a_page_read_by_cookie_and_by_basic_is_kept_once(
    service: Service, client_as: Callable[[str], TestClient], client: TestClient
) -> None:
    """What a page uses of its reader is their name, role and whether they may change
    anything, not how they authenticated: the session's read is the Basic read's page."""
    populate(service.store, now=utcnow())
    service.snapshots.publish()
    basic = client_as("alice").get("/jobs/101")
    computed = service.snapshots.computations
    login = client.post(
        "/login",
        data={"username": "alice", "password": DEMO_PASSWORDS["alice"], "next": "/"},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert login.status_code == 303
    by_cookie = client.get("/jobs/101")
    assert by_cookie.content == basic.content
    assert service.snapshots.computations == computed


def test_a_new_alert_shows_on_the_page_and_document_at_the_next_read(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    """The alerts are the reader's layer, keyed on the job's alert changes: the kept body
    does not hide a new one."""
    populate(service.store, now=utcnow())
    service.snapshots.publish()
    alice = client_as("alice")
    assert "No alert on this job." in alice.get("/jobs/101").text
    assert alice.get("/api/jobs/101").json()["alerts"] == []
    upsert_alerts(service.store, [_alert("101", "nsenter into PID 1")]).result()
    assert "nsenter into PID 1" in alice.get("/jobs/101").text
    assert [a["title"] for a in alice.get("/api/jobs/101").json()["alerts"]] == [
        "nsenter into PID 1"
    ]


def test_a_job_without_alerts_queries_none_for_any_reader(
    service: Service, client_as: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs that have alerts are read once per alert change: a job outside them shows
    none to every reader without a query per reader's scope; one with an alert queries it."""
    populate(service.store, now=utcnow())
    upsert_alerts(service.store, [_alert("102", "nsenter")]).result()
    service.snapshots.publish()
    queried: list[str | None] = []
    alerts_for = alert_access.alerts_for

    def counted(store: Store, principal: Principal, **kwargs: Any) -> list[Alert]:
        queried.append(kwargs.get("job_id"))
        return alerts_for(store, principal, **kwargs)

    monkeypatch.setattr("hpcscope.service.core.alert_access.alerts_for", counted)
    for user in ("alice", "carol", "admin"):
        client = client_as(user)
        assert "No alert on this job." in client.get("/jobs/101").text
        assert client.get("/api/jobs/101").json()["alerts"] == []
    assert queried == []
    titles = {a["title"] for a in client_as("bob").get("/api/jobs/102").json()["alerts"]}
    assert titles == {"nsenter"} and queried == ["102"]


def _kinds(store: Store) -> list[str]:
    rows = store.query("SELECT kind FROM job_documents WHERE job_id = '9' ORDER BY kind")
    return [str(v) for v in rows.column("kind").to_pylist()]


def test_a_summarised_jobs_parts_are_stored_and_used_while_rendered_from_its_report(
    service: Service, client_as: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished, summarised job's report parts are stored when first rendered; a process
    that has not rendered them reads them (the same bytes, no notes computed) while they were
    rendered from the very report document it reads, and renders them again otherwise."""
    _job(service.store)
    _summarised(service.store)
    alice = client_as("alice")
    page = alice.get("/jobs/9").content
    service.store.flush()
    kind = view_kind_of(service)
    assert _kinds(service.store) == [kind]
    rendered: list[str] = []

    def counted(on: Service, report: JobReport) -> JobNotesDocument:
        rendered.append(report.job_id)
        return notes_of_report(on, report)

    monkeypatch.setattr("hpcscope.serve.job_view.notes_of_report", counted)
    service.snapshots.clear()  # as a restarted server: nothing kept in memory
    assert alice.get("/jobs/9").content == page and rendered == []
    other = json.dumps({"report": "{}", "head": "<h1>stale</h1>", "tail": ""}).encode()
    store_views(service.store, kind, [("9", other)]).result()
    service.snapshots.clear()
    assert alice.get("/jobs/9").content == page and rendered == ["9"]
    assert client_as("bob").get("/jobs/9").status_code == 404


def test_the_keeper_stores_each_summarised_job_once_and_drops_other_versions(
    service: Service,
) -> None:
    _job(service.store)
    store_views(service.store, "job_view:an-older-version", [("9", b"{}")]).result()
    keeper = ViewKeeper(service, start=lambda work: work())
    keeper.after_cycle()
    assert keeper.stored == 0  # finished, not summarised yet: rendered when read
    _summarised(service.store)
    keeper.after_cycle()
    keeper.after_cycle()
    assert keeper.stored == 1
    assert _kinds(service.store) == [view_kind_of(service)]
