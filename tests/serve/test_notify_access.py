"""Who sees and changes what on the notification routes: job notes (the job's visibility
rule), preferences (one's own only) and the audit log (admins only), for alice, bob, dave
(researchers), carol (team lead of vision and nlp), admin and an anonymous visitor. Every
response is searched for the tokens of jobs outside the viewer's scope: 0 cross-tenant reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.store.notify import AuditEntry, record_audit
from tests.serve.test_diagram_access import logged_in
from tests.support.notify_data import SCENARIO, write_scenario

NOW = utcnow()
VIEWERS = ("admin", "alice", "bob", "dave", "carol")
#: viewer -> the scenario jobs they may see
SEES = {
    "admin": set(SCENARIO),
    "alice": {"5001", "5004"},
    "bob": {"5002", "5005"},
    "dave": {"5003"},
    "carol": {"5001", "5002", "5004", "5005"},
}


def _tokens(job_id: str) -> set[str]:
    user, account, *_ = SCENARIO[job_id]
    return {job_id, f"job-{job_id}", f"{user}@", account}


@pytest.fixture
def clients(service: Service) -> Iterator[dict[str | None, TestClient]]:
    write_scenario(service.store, now=NOW)
    record_audit(
        service.store,
        [
            AuditEntry(
                at=NOW,
                kind="notification",
                rule_id="low-efficiency",
                job_id=job,
                user=user,
                account=account,
                channel="email",
                recipient=f"{user}@example.org",
                outcome="sent",
                detail=f"job-{job}",
            )
            for job, (user, account, *_) in SCENARIO.items()
        ],
    ).result()
    made = {user: logged_in(service, user) for user in (*VIEWERS, None)}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _leaks(viewer: str, text: str) -> set[str]:
    hidden = set(SCENARIO) - SEES[viewer]
    return {t for job in hidden for t in _tokens(job) if t in text} - {
        t for job in SEES[viewer] for t in _tokens(job)
    }


def test_notes_follow_the_job_visibility_rule(clients: dict[str | None, TestClient]) -> None:
    leaks = checked = 0
    for viewer in VIEWERS:
        for job_id in SCENARIO:
            response = clients[viewer].get(f"/api/jobs/{job_id}/notes")
            checked += 1
            if job_id in SEES[viewer]:
                assert response.status_code == 200, (viewer, job_id)
                assert response.json()["job_id"] == job_id
            else:
                assert response.status_code == 404, (viewer, job_id)
            found = _leaks(viewer, response.text)
            assert not found, (viewer, job_id, found, response.text[:300])
            leaks += bool(found)
    assert clients[None].get("/api/jobs/5001/notes").status_code == 401
    assert (leaks, checked) == (0, 25)


def test_the_notes_of_a_job_say_what_is_wrong(clients: dict[str | None, TestClient]) -> None:
    notes = clients["alice"].get("/api/jobs/5001/notes").json()
    assert [n["rule_id"] for n in notes["notes"]] == ["unused-gpus", "memory-headroom"]
    assert [(g["node"], g["gpu"]) for g in notes["gpus"]] == [("gpu01", 0), ("gpu01", 1)]
    assert notes["gpus"][0]["fb_total_bytes"] == 81559 * 2**20  # the topology's H100
    assert notes["gpus"][0]["max_fb_used_bytes"] == 0.5 * 2**30
    assert notes["notes"][1]["figures"]["memory_used_ratio"] == pytest.approx(512 / 81559)
    dave = clients["dave"].get("/api/jobs/5003/notes").json()
    assert "over-requested-gpus" in [n["rule_id"] for n in dave["notes"]]


def test_preferences_are_ones_own(clients: dict[str | None, TestClient]) -> None:
    for viewer in VIEWERS:
        mine = clients[viewer].get("/api/notify/preferences", params={"user": "bob"}).json()
        assert mine["user"] == viewer and mine["email_enabled"] is True
    changed = clients["alice"].put(
        "/api/notify/preferences", json={"webhook_enabled": False, "muted_rules": ["xid-failure"]}
    )
    assert changed.status_code == 200
    assert changed.json() | {"updated_at": None} == {
        "user": "alice",
        "email_enabled": True,
        "webhook_enabled": False,
        "muted_rules": ["xid-failure"],
        "rules": ["low-efficiency", "idle-allocation", "over-requested-gpus", "xid-failure"],
        "updated_at": None,
        "updated_by": "alice",
    }
    # nobody else's changed, admins' included
    for viewer in ("admin", "bob", "carol", "dave"):
        other = clients[viewer].get("/api/notify/preferences").json()
        assert (other["webhook_enabled"], other["muted_rules"]) == (True, [])
    # an admin's PUT changes the admin's own, never alice's
    clients["admin"].put("/api/notify/preferences", json={"email_enabled": False})
    assert clients["alice"].get("/api/notify/preferences").json()["email_enabled"] is True
    bad = clients["bob"].put("/api/notify/preferences", json={"muted_rules": ["nope"]})
    assert bad.status_code == 400 and "unknown rule(s) nope" in bad.json()["detail"]
    assert clients[None].get("/api/notify/preferences").status_code == 401
    assert clients[None].put("/api/notify/preferences", json={}).status_code in (401, 403)


def test_the_page_form_changes_ones_own(clients: dict[str | None, TestClient]) -> None:
    page = clients["bob"].get("/notify")
    assert page.status_code == 200 and 'id="preferences"' in page.text
    assert 'id="audit"' not in page.text and not _leaks("bob", page.text)
    sent = clients["bob"].post(
        "/notify/preferences",
        data={"email_enabled": "on", "muted": ["low-efficiency"]},
        follow_redirects=False,
    )
    assert sent.status_code == 303
    mine = clients["bob"].get("/api/notify/preferences").json()
    assert (mine["email_enabled"], mine["webhook_enabled"], mine["muted_rules"]) == (
        True,
        False,
        ["low-efficiency"],
    )
    assert clients["alice"].get("/api/notify/preferences").json()["muted_rules"] == []


def test_the_audit_log_is_for_admins(clients: dict[str | None, TestClient]) -> None:
    entries = clients["admin"].get("/api/notify/audit").json()["entries"]
    assert {e["job_id"] for e in entries} == set(SCENARIO)
    assert [e["job_id"] for e in clients["admin"].get("/api/notify/audit?job=5002").json()[
        "entries"]] == ["5002"]  # fmt: skip
    page = clients["admin"].get("/notify")
    assert 'id="audit"' in page.text and "bob@example.org" in page.text
    for viewer in ("alice", "bob", "dave", "carol"):
        denied = clients[viewer].get("/api/notify/audit")
        assert denied.status_code == 403, viewer
        assert "example.org" not in denied.text
    assert clients[None].get("/api/notify/audit").status_code == 401


def test_the_job_page_shows_the_notes_to_those_who_see_the_job(
    clients: dict[str | None, TestClient],
) -> None:
    page = clients["dave"].get("/jobs/5003")
    assert page.status_code == 200
    assert 'data-rule="over-requested-gpus"' in page.text
    assert "1 of the 2 allocated GPUs did no work (gpu01 GPU 5)" in page.text
    assert "Threshold: a GPU is idle at or under 5 % SM active and utilization." in page.text
    healthy = clients["alice"].get("/jobs/5004").text
    assert "No note: nothing to change." in healthy
    assert clients["alice"].get("/jobs/5003").status_code == 404
