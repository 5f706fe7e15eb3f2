"""Who sees and acts on which alert: the alerts page, its JSON twin, the job pages' alerts and
the state route, for alice, bob, dave (researchers), carol (team lead of vision and nlp),
admin and an anonymous visitor. Reads: exactly the alerts of the jobs in scope, and no token
of another job anywhere in a response (0 cross-tenant reads). State: the alert's job user or
an admin (G9); 404 for an alert one cannot see, 403 for one seen but not one's own. Threats
mode counts the alerts each viewer may see, and follows every alert write, not only the
collector's cycles."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.routes.alerts import KEPT_ROWS
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import read_owners
from hpcscope.service.source_settings import FalcoSection
from hpcscope.store.alerts import upsert_alerts
from tests.serve.test_diagram_access import JOB_TOKENS, logged_in
from tests.support.fleet import write_fleet

NOW = utcnow()


def _alert(rule: str, job: str | None, vector: Vector, severity: Severity) -> Alert:
    return Alert(
        rule_id=rule,
        vector=vector,
        severity=severity,
        title=f"{rule} on {job}",
        first_seen=NOW - timedelta(minutes=2),
        last_seen=NOW,
        node="gpu01",
        job_id=job,
        subject=f"/tmp/payload-{job}",
        evidence=(Evidence(f"exec of /tmp/payload-{job}", "falco.json", "line 3"),),
    )


ALERTS = {
    "alice": _alert("SC-2", "4410001", Vector.SUPPLY_CHAIN, Severity.CRITICAL),
    "bob": _alert("W-1", "4410002", Vector.DATA_POISONING, Severity.HIGH),
    "dave": _alert("CE-3", "4410003", Vector.CONTAINER_ESCAPE, Severity.HIGH),
    "nojob": _alert("RD-4", None, Vector.RDMA, Severity.HIGH),
}
#: viewer -> the alerts (by owner key above) they see
SEES = {
    "admin": {"alice", "bob", "dave", "nojob"},
    "alice": {"alice"},
    "bob": {"bob"},
    "dave": {"dave"},
    "carol": {"alice", "bob"},
}
#: viewer -> the alerts they may acknowledge
ACTS = {"admin": set(ALERTS), "alice": {"alice"}, "bob": {"bob"}, "dave": {"dave"}, "carol": set()}
JOB_OF = {"alice": "4410001", "bob": "4410002", "dave": "4410003"}


@pytest.fixture
def clients(service: Service) -> Iterator[dict[str | None, TestClient]]:
    write_fleet(service.store, now=NOW)
    upsert_alerts(service.store, list(ALERTS.values())).result()
    # a source that raises alerts (Falco's http_output): detections are configured
    service.settings = service.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    made = {user: logged_in(service, user) for user in (*SEES, None)}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _tokens(owner: str) -> set[str]:
    alert = ALERTS[owner]
    tokens = {alert.key, f"/tmp/payload-{alert.job_id}"}
    return tokens | (JOB_TOKENS[alert.job_id] if alert.job_id else set())


def test_reads_show_exactly_the_alerts_in_scope(clients: dict[str | None, TestClient]) -> None:
    leaks = 0
    checked = 0
    for user, sees in SEES.items():
        client = clients[user]
        hidden = set(ALERTS) - sees
        for url in ("/alerts", "/api/alerts", "/api/alerts?state=open", "/alerts?severity=HIGH"):
            response = client.get(url)
            assert response.status_code == 200, (user, url)
            if url.startswith("/api/"):
                keys = {a["key"] for a in response.json()["alerts"]}
                assert keys == {ALERTS[o].key for o in sees}, (user, url)
            for owner in hidden:
                visible_tokens = set().union(*(_tokens(o) for o in sees)) if sees else set()
                leaks += any(
                    t in response.text for t in _tokens(owner) - visible_tokens - {"gpu01"}
                )
                checked += 1
        for owner, job in JOB_OF.items():
            response = client.get(f"/api/jobs/{job}/alerts")
            if owner in sees:
                assert [a["key"] for a in response.json()["alerts"]] == [ALERTS[owner].key]
                page = client.get(f"/jobs/{job}")
                assert page.status_code == 200 and ALERTS[owner].rule_id in page.text
            else:
                assert response.status_code == 404, (user, job)
    assert checked > 0 and leaks == 0


def test_anonymous_visitors_see_no_alert(clients: dict[str | None, TestClient]) -> None:
    anonymous = clients[None]
    assert anonymous.get("/api/alerts").status_code == 401
    page = anonymous.get("/alerts", follow_redirects=False)
    assert page.status_code in (302, 303, 307) and "/login" in page.headers["location"]
    assert anonymous.post(f"/api/alerts/{ALERTS['alice'].key}/state", json={"state": "resolved"}
                          ).status_code == 401  # fmt: skip


def test_state_changes_only_on_ones_own_jobs(clients: dict[str | None, TestClient]) -> None:
    for user in SEES:
        for owner, alert in ALERTS.items():
            response = clients[user].post(
                f"/api/alerts/{alert.key}/state", json={"state": "acknowledged"}
            )
            expected = 200 if owner in ACTS[user] else 403 if owner in SEES[user] else 404
            assert response.status_code == expected, (user, owner, response.text)
            if expected == 200:
                body = response.json()
                assert (body["state"], body["state_by"]) == ("acknowledged", user)
                clients[user].post(f"/api/alerts/{alert.key}/state", json={"state": "open"})
            else:
                assert alert.key not in response.text and "44100" not in response.text


def test_the_page_buttons_post_and_come_back(clients: dict[str | None, TestClient]) -> None:
    alice = clients["alice"]
    page = alice.get("/alerts?state=open")
    assert "Acknowledge" in page.text and "Resolve" in page.text
    key = ALERTS["alice"].key
    response = alice.post(
        f"/api/alerts/{key}/state",
        data={"state": "resolved", "back": "/alerts?state=open"},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/alerts?state=open"
    assert alice.get("/api/alerts?state=open").json()["count"] == 0
    assert alice.get("/api/alerts?state=resolved").json()["alerts"][0]["state_by"] == "alice"
    # carol sees alice's alert but gets no button for it, and an error if she posts
    assert "not your job" in clients["carol"].get("/alerts").text
    denied = clients["carol"].post(
        f"/api/alerts/{key}/state", data={"state": "open"}, follow_redirects=False
    )
    assert denied.status_code == 303 and "error=" in denied.headers["location"]


def test_each_alert_row_is_rendered_once_per_reader_right_and_address(
    clients: dict[str | None, TestClient],
) -> None:
    """The alerts page joins rows kept per alert, whether the reader may act on it and the
    page's address: a page read again renders none, alice's row has her buttons and carol's
    the same alert's none, and a state change is a new alert, so a new row."""
    KEPT_ROWS.clear()
    alice, carol = clients["alice"], clients["carol"]
    first = alice.get("/alerts?state=open").text
    rendered = KEPT_ROWS.misses
    assert rendered == 1 and 'value="/alerts?state=open"' in first and "Resolve" in first
    assert alice.get("/alerts?state=open").text == first  # kept page, kept row
    assert "not your job" in carol.get("/alerts?state=open").text  # other rows: no buttons
    assert KEPT_ROWS.misses == rendered + 2  # alice's and bob's, as carol's
    key = ALERTS["alice"].key
    alice.post(f"/api/alerts/{key}/state", data={"state": "acknowledged"}, follow_redirects=False)
    after = alice.get("/alerts").text
    assert 'acknowledged <span class="muted">by alice</span>' in after and "Reopen" in after


def test_filters_are_checked_and_applied(clients: dict[str | None, TestClient]) -> None:
    admin = clients["admin"]
    by_vector = admin.get("/api/alerts?vector=rdma-blind-spot").json()
    assert [a["rule_id"] for a in by_vector["alerts"]] == ["RD-4"]
    assert by_vector["filters"]["vector"] == "rdma-blind-spot"
    assert admin.get("/api/alerts?vector=3").json()["count"] == 1
    assert admin.get("/api/alerts?severity=critical").json()["count"] == 1
    assert admin.get("/api/alerts?job=4410002").json()["alerts"][0]["rule_id"] == "W-1"
    for bad in ("vector=9", "severity=HUGE", "state=closed"):
        response = admin.get(f"/api/alerts?{bad}")
        assert response.status_code == 400 and bad.split("=")[1] in response.json()["detail"]
    assert admin.get("/alerts?state=closed").status_code == 400


def test_threats_mode_lights_nodes_and_vectors_by_worst_severity(
    clients: dict[str | None, TestClient],
) -> None:
    elements = clients["admin"].get("/api/diagram/state").json()["elements"]
    node = next(e for k, e in elements.items() if k.endswith("gpu01") and "alerted" in e["class"])
    assert "sev-critical" in node["class"] and "4 open alerts, worst CRITICAL" in node["label"]
    supply = elements["vector-supply-chain"]
    assert supply["class"] == "alerted sev-critical" and supply["lines"][1] == "1 open"
    assert supply["label"].endswith(": 1 open alert, worst CRITICAL")  # one alert, singular
    assert elements["vector-gpu-memory-leakage"]["label"].endswith(": 0 open alerts")
    assert elements["vector-rdma-blind-spot"]["class"] == "alerted sev-high"
    assert elements["vector-gpu-memory-leakage"]["class"] == ""
    detections = clients["alice"].get("/api/diagram").json()["detections"]
    assert detections["worst_by_vector"] == {"supply-chain": "CRITICAL"}
    # alice counts her own job's alert only: no count of another job's or of a process
    # outside every job
    assert detections["open_by_node"] == {"gpu01": 1}
    carol = clients["carol"].get("/api/diagram").json()["detections"]
    assert carol["open_by_node"] == {"gpu01": 2}


def _escape(client: TestClient) -> Any:
    return client.get("/api/diagram/state").json()["elements"]["vector-container-escape"]


def test_an_alert_written_between_cycles_shows_in_threats_mode_at_the_next_poll(
    service: Service, clients: dict[str | None, TestClient]
) -> None:
    """The security engine writes alerts between the collector's cycles (the detection
    delay): a kept live state or page of the cycle before must not hide them."""
    service.snapshots.publish()  # a collector: one generation per cycle, none in this test
    admin, alice, dave = clients["admin"], clients["alice"], clients["dave"]
    assert _escape(admin)["lines"][1] == "1 open"  # dave's CE-3
    assert _escape(alice)["class"] == "" and _escape(dave)["lines"][1] == "1 open"
    page = admin.get("/diagram?mode=threats").text

    outside = replace(_alert("CE-3", None, Vector.CONTAINER_ESCAPE, Severity.CRITICAL),
                      node="gpu02", subject="nsenter -t 1", pod="ml/escape-0")  # fmt: skip
    upsert_alerts(service.store, [outside]).result()
    after = _escape(admin)
    assert after["lines"][1] == "2 open" and after["class"] == "alerted sev-critical"
    node = next(e for k, e in admin.get("/api/diagram/state").json()["elements"].items()
                if k.endswith("gpu02") and "alerted" in e["class"])  # fmt: skip
    assert "; 1 open alert" in node["label"] and node["label"].endswith("worst CRITICAL")
    assert admin.get("/diagram?mode=threats").text != page
    # a node-scoped alert: the security team counts it, a researcher never does
    assert _escape(alice)["class"] == "" and _escape(dave)["lines"][1] == "1 open"
    # nothing else is recomputed per poll: asking again is served from memory
    computed = service.snapshots.computations
    _escape(admin)
    assert service.snapshots.computations == computed
    # a state change is a write too: a resolved alert is no longer counted
    resolved = admin.post(f"/api/alerts/{outside.key}/state", json={"state": "resolved"})
    assert resolved.status_code == 200
    assert _escape(admin)["lines"][1] == "1 open"


def _misses(service: Service, view: str) -> float:
    cost = service.snapshots.costs.snapshot().get(view)
    return 0.0 if cost is None else cost.misses


def test_between_cycles_the_alerts_page_and_list_are_answered_on_the_read_lane(
    service: Service, clients: dict[str | None, TestClient]
) -> None:
    """Once a collector publishes its cycles, the alerts take the jobs' owners as it read them
    after its last cycle: a write other than an alert's (many a second at 128 nodes) makes
    no query, and no reader of the new list or page misses it (they were ~1,100 misses in
    24 s). A job's first alert since is nobody's until the cycle's end (the security team and
    admins see it, its owner not yet), then its owner's."""
    read_owners(service)  # the collector's hooks after a cycle, the owners first
    service.snapshots.publish()
    admin, alice = clients["admin"], clients["alice"]
    for client in (admin, alice):
        assert client.get("/alerts").status_code == 200
        assert client.get("/api/alerts").status_code == 200
    jobs = pa.table({"job_id": ["4410998"], "user": ["bob"], "account": ["x"], "source": ["t"]})
    service.store.upsert_jobs(jobs).result()  # a write other than an alert's
    newer = replace(ALERTS["alice"], subject="/tmp/second", job_id="4410001")
    upsert_alerts(service.store, [newer]).result()
    missed = [_misses(service, v) for v in ("serve.alerts_page", "serve.alerts")]
    assert newer.key in admin.get("/alerts").text
    assert newer.key in {a["key"] for a in admin.get("/api/alerts").json()["alerts"]}
    assert [_misses(service, v) for v in ("serve.alerts_page", "serve.alerts")] == missed
    # alice's job 4410001 had alerts before: its owner was read, so the new one is hers at once
    assert newer.key in alice.get("/alerts").text
    other = replace(ALERTS["bob"], subject="/tmp/on-a-new-job", job_id="4410998")
    upsert_alerts(service.store, [other]).result()
    bob = clients["bob"]
    assert other.key not in {a["key"] for a in bob.get("/api/alerts").json()["alerts"]}
    assert other.key in {a["key"] for a in admin.get("/api/alerts").json()["alerts"]}
    read_owners(service)  # the cycle's end
    service.snapshots.publish()
    assert other.key in {a["key"] for a in bob.get("/api/alerts").json()["alerts"]}
    assert other.key in bob.get("/alerts").text
