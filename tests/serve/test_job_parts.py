"""A job's page and document joined from parts kept per job and per visibility
(``serve/job_parts.py``): the bytes of the page rendered whole and of the document serialised
by its models, for every reader, after every kind of write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import Markup, escape
from starlette.requests import Request

from hpcscope.model.access import Principal, Role
from hpcscope.model.alerts import Alert, AlertState, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve import job_parts
from hpcscope.serve.job_view import job_view
from hpcscope.serve.templating import render, templates
from hpcscope.service.alerts.contracts import JobReportWithAlerts
from hpcscope.service.core import Service
from hpcscope.service.jobs.contracts import JobReportDocument
from hpcscope.service.snapshots import Snapshots
from hpcscope.service.traces.capture_contracts import JobReportWithPhases
from hpcscope.service.traces.job_phases import phases_of
from hpcscope.store.alerts import upsert_alerts
from tests.serve.test_job_phases import capture_job_101
from tests.support.data import populate

#: Who reads which job: the owner, their team lead, the admin, an auditor; bob his own.
READERS = {
    "alice": Principal(name="alice", role=Role.RESEARCHER),
    "carol": Principal(
        name="carol", role=Role.TEAM_LEAD, coordinated_accounts=frozenset({"vision"})
    ),
    "admin": Principal(name="admin", role=Role.ADMIN),
}


def _alert(job_id: str, title: str, *, rule: str = "CE-3") -> Alert:
    now = utcnow()
    return Alert(
        rule_id=rule,
        vector=Vector.CONTAINER_ESCAPE,
        severity=Severity.HIGH,
        title=title,
        first_seen=now - timedelta(minutes=1),
        last_seen=now,
        node="gpu01",
        job_id=job_id,
        subject=title,
    )


def _request(path: str) -> Request:
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": path, "headers": []}
    scope |= {"query_string": b"", "server": ("testserver", 80), "scheme": "http"}
    return Request(scope)


def _render(name: str, **context: object) -> str:
    return templates.env.get_template(name).render(context)


def _whole_page(service: Service, user: str, job_id: str) -> bytes:
    """The job's page as one render of ``job.html`` with every part rendered now."""
    principal = service.principal(user)
    assert principal is not None
    job = service.visible_job(principal, job_id)
    assert job is not None
    report = service.report_of(job)
    assert report is not None
    view = job_view(service, job, report)
    alerts = service.alerts_of(job)
    context = {
        "job_id": job_id,
        "head_html": Markup(view.head.body.decode()),
        "alerts_html": Markup(_render("_job_alerts.html", job_id=job_id, alerts=alerts)),
        "phases_html": Markup(
            _render("_job_phases.html", job_id=job_id, phases=phases_of(service, job))
        ),
        "tail_html": Markup(view.tail.body.decode()),
    }
    page = render(_request(f"/jobs/{job_id}"), "job.html", context, principal=principal)
    return bytes(page.body)


def _whole_document(service: Service, user: str, job_id: str) -> bytes:
    """The job's document as its models serialise it whole."""
    principal = service.principal(user)
    assert principal is not None
    job = service.visible_job(principal, job_id)
    assert job is not None
    report = service.report_of(job)
    assert report is not None
    with_alerts = JobReportWithAlerts.of(
        JobReportDocument.from_report(report), service.alerts_of(job)
    )
    return JobReportWithPhases.join(with_alerts, phases_of(service, job)).model_dump_json().encode()


def _same_as_whole(service: Service, client_as: Callable[[str], TestClient]) -> None:
    for user, job_id in [(u, "101") for u in READERS] + [("bob", "102"), ("admin", "102")]:
        client = client_as(user)
        page = client.get(f"/jobs/{job_id}")
        assert page.status_code == 200
        assert page.content == _whole_page(service, user, job_id), (user, job_id)
        document = client.get(f"/api/jobs/{job_id}")
        assert document.content == _whole_document(service, user, job_id), (user, job_id)


def test_the_joined_page_and_document_are_the_whole_ones_after_each_write(
    service: Service, client_as: Callable[[str], TestClient], tmp_path: Path
) -> None:
    """For the owner, the team lead, the admin and another user's job: the same bytes as the
    page rendered whole and the document serialised whole, before any alert, after alert
    writes on the job, after a state change, and after a new capture window (each write a
    new generation, read at once; the snapshots' clock stands still, so that a running job's
    report is the same in both)."""
    store = service.store
    service.snapshots = Snapshots(lambda: store.writes_committed, clock=lambda: 1000.0)
    populate(store, now=utcnow())
    _same_as_whole(service, client_as)
    upsert_alerts(store, [_alert("101", "nsenter"), _alert("102", "ptrace")]).result()
    _same_as_whole(service, client_as)
    assert b"nsenter" in client_as("carol").get("/jobs/101").content
    upsert_alerts(store, [_alert("101", "mount", rule="CE-1")]).result()
    _same_as_whole(service, client_as)
    [alert] = [a for a in service.alerts(READERS["admin"], job_id="101") if a.rule_id == "CE-1"]
    assert service.set_alert_state(READERS["admin"], alert.key, AlertState.ACKNOWLEDGED)
    _same_as_whole(service, client_as)
    assert b"acknowledged" in client_as("alice").get("/jobs/101").content
    capture_job_101(service, tmp_path / "spool")
    store.flush()
    _same_as_whole(service, client_as)
    assert b'"captured":true' in client_as("alice").get("/api/jobs/101").content
    assert b"backward" in client_as("carol").get("/jobs/101").content


def test_the_frame_puts_any_job_id_as_the_template_escapes_it() -> None:
    """The page's frame is rendered once per reader with a mark for the job's id: the id put
    in its place is escaped as the template escapes it."""
    for job_id in ("101", "a<b>&\"c'", "é-1"):
        parts = {"head_html": Markup("MAIN")} | {
            name: Markup("") for name in ("alerts_html", "phases_html", "tail_html")
        }
        principal = READERS["alice"]
        whole = render(
            _request("/jobs/x"), "job.html", {"job_id": job_id, **parts}, principal=principal
        )
        marked = render(
            _request("/jobs/x"),
            "job.html",
            {"job_id": job_parts._ID_MARK, **parts},
            principal=principal,
        )
        before, after = bytes(marked.body).split(job_parts._ID_MARK.encode())
        escaped = str(escape(job_id)).encode()
        assert before + escaped + after == bytes(whole.body)


def test_readers_share_the_jobs_parts_and_an_alert_write_renders_only_the_alerts(
    service: Service, client_as: Callable[[str], TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three readers of one job keep its report's parts once (each a frame of their own, not a
    copy of the page), and an alert written on the job renders its alerts part again at the
    next read, not the page: the page used to be kept whole per reader and rendered whole
    again after each alert write on the job."""
    populate(service.store, now=utcnow())
    service.snapshots.publish()
    alice = client_as("alice")
    size = len(alice.get("/jobs/101").content)
    kept = service.snapshots.kept_bytes
    for user in ("carol", "admin"):
        assert client_as(user).get("/jobs/101").status_code == 200
    assert service.snapshots.kept_bytes - kept < size // 2
    rendered: list[str] = []
    whole = render

    def counted(request: Request, name: str, *args: Any, **kwargs: Any) -> Any:
        rendered.append(name)
        return whole(request, name, *args, **kwargs)

    monkeypatch.setattr(job_parts, "render", counted)
    upsert_alerts(service.store, [_alert("101", "nsenter into PID 1")]).result()
    assert "nsenter into PID 1" in alice.get("/jobs/101").text
    assert rendered == []


def test_a_304_for_the_client_that_has_the_answer_and_a_new_etag_after_a_write(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    populate(service.store, now=utcnow())
    service.snapshots.publish()
    alice = client_as("alice")
    for path in ("/jobs/101", "/api/jobs/101"):
        first = alice.get(path)
        etag = first.headers["etag"]
        assert first.headers["cache-control"] == "no-cache"
        again = alice.get(path, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert client_as("carol").get(path).headers["etag"] != etag or path.startswith("/api")
    etags = {p: alice.get(p).headers["etag"] for p in ("/jobs/101", "/api/jobs/101")}
    upsert_alerts(service.store, [_alert("101", "nsenter")]).result()
    for path, etag in etags.items():
        answer = alice.get(path, headers={"If-None-Match": etag})
        assert answer.status_code == 200 and b"nsenter" in answer.content
