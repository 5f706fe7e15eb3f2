"""The access matrix for the identity features: API tokens, the security and auditor roles.

Viewers: alice, bob, dave (researchers), carol (team lead of vision and nlp), admin, sam
(security) and audrey (auditor), each over HTTP Basic **and** over a read API token of their
own. On every JSON route that reads job data, alerts or tokens, the job ids, names, users and
accounts of the jobs outside the viewer's scope must appear nowhere (0 cross-tenant reads), and
a token must see exactly what its user sees over Basic. Then what tokens may not do: change
anything (read scope), open a page, outlive revocation or expiry, grant more than their user,
list or revoke other people's tokens. The counts go to
``test-artifacts/identity-access-matrix.json``.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import REDACTED_PATH
from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.store.alerts import upsert_alerts
from tests.serve.test_alerts_access import ALERTS as TENANT_ALERTS
from tests.serve.test_alerts_access import NOW
from tests.serve.test_diagram_access import JOB_TOKENS, VISIBLE
from tests.serve.test_diagram_access import _urls as diagram_urls
from tests.support.fleet import write_fleet
from tests.support.identity import COST_LOG2, PASSWORDS, identity_users
from tests.support.paths import ARTIFACTS

WEIGHTS_FILE = "/lustre/scratch/checkpoints/llama-8b/step-400/model.safetensors"
ALERTS = {
    **TENANT_ALERTS,
    "weights": Alert(
        rule_id="SC-4",
        vector=Vector.SUPPLY_CHAIN,
        severity=Severity.HIGH,
        title=f"checkpoint read outside the job: {WEIGHTS_FILE}",
        first_seen=NOW,
        last_seen=NOW,
        node="gpu02",
        job_id="4410002",
        subject=WEIGHTS_FILE,
        evidence=(Evidence(f"openat {WEIGHTS_FILE} by curl", "tetragon.log", "line 9"),),
    ),
}
OWNER_JOB = {"alice": "4410001", "bob": "4410002", "dave": "4410003", "weights": "4410002"}

#: viewer -> the jobs whose data they read
JOBS_SEEN: dict[str, set[str]] = {
    **{user: jobs for user, jobs in VISIBLE.items() if user is not None},
    "sam": set(),
    "audrey": set(JOB_TOKENS),
}
#: viewer -> the alerts (keys of ALERTS) they read
ALERTS_SEEN: dict[str, set[str]] = {
    user: {o for o, job in OWNER_JOB.items() if job in jobs} for user, jobs in JOBS_SEEN.items()
}
for _everything in ("admin", "sam", "audrey"):
    ALERTS_SEEN[_everything] = set(ALERTS)
VIEWERS = list(JOBS_SEEN)


def _basic(user: str) -> dict[str, str]:
    secret = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {secret}"}


@pytest.fixture
def identity_service(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=COST_LOG2,
    )
    service = Service.open(settings, users=identity_users())
    write_fleet(service.store, now=utcnow())
    upsert_alerts(service.store, list(ALERTS.values())).result()
    yield service
    service.close()


@pytest.fixture
def clients(identity_service: Service) -> Iterator[dict[tuple[str, str], TestClient]]:
    """(viewer, "basic" | "token") -> a client; each token is its user's own read token."""
    app = create_app(identity_service)
    made: dict[tuple[str, str], TestClient] = {}
    for user in VIEWERS:
        basic = TestClient(app, headers=_basic(user))
        basic.__enter__()
        created = basic.post("/api/tokens", json={"label": f"{user}-nightly", "scope": "read"})
        assert created.status_code == 201, (user, created.text)
        token = TestClient(app, headers={"Authorization": f"Bearer {created.json()['secret']}"})
        token.__enter__()
        made[(user, "basic")], made[(user, "token")] = basic, token
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _job_urls() -> list[str]:
    urls = ["/api/jobs", "/api/cluster", "/api/diagram", "/api/diagram/state", "/api/whoami"]
    urls += ["/api/traces", "/api/diagram/elements/gpu-gpu02-2", "/api/diagram/elements/scheduler"]
    for job in JOB_TOKENS:
        urls += [f"/api/jobs/{job}", f"/api/jobs/{job}/alerts", f"/api/jobs/{job}/timeseries"]
    return urls


def _forbidden(seen: set[str]) -> set[str]:
    hidden = {token for job in set(JOB_TOKENS) - seen for token in JOB_TOKENS[job]}
    return hidden - {token for job in seen for token in JOB_TOKENS[job]}


def _leak(pattern: re.Pattern[str] | None, text: str) -> str | None:
    found = pattern.search(text) if pattern is not None else None
    return found.group(0) if found else None


def _pattern(forbidden: set[str]) -> re.Pattern[str] | None:
    if not forbidden:
        return None
    return re.compile(r"\b(" + "|".join(map(re.escape, sorted(forbidden))) + r")\b")


def test_access_matrix_with_tokens_and_the_new_roles(
    clients: dict[tuple[str, str], TestClient],
) -> None:
    matrix: dict[str, Any] = {}
    responses = leaks = 0
    for user in VIEWERS:
        job_pattern = _pattern(_forbidden(JOBS_SEEN[user]))
        alert_jobs = {OWNER_JOB[o] for o in ALERTS_SEEN[user] if o in OWNER_JOB}
        alert_pattern = _pattern(_forbidden(JOBS_SEEN[user] | alert_jobs))
        for kind in ("basic", "token"):
            client = clients[(user, kind)]
            for url in _job_urls():
                response = client.get(url)
                job = url.split("/")[3] if url.startswith("/api/jobs/") else None
                if job is not None and job not in JOBS_SEEN[user]:
                    assert response.status_code == 404, (user, kind, url, response.status_code)
                else:
                    assert response.status_code == 200, (user, kind, url, response.status_code)
                responses += 1
                # a 404 may repeat the id the viewer asked for: that tells them nothing
                text = (
                    response.text.replace(job, "")
                    if response.status_code == 404 and job
                    else response.text
                )
                leak = _leak(job_pattern, text)
                leaks += leak is not None
                assert leak is None, f"{user} ({kind}) reads {leak!r} on {url}"
            listed = client.get("/api/alerts")
            responses += 1
            keys = {a["key"] for a in listed.json()["alerts"]}
            assert keys == {ALERTS[o].key for o in ALERTS_SEEN[user]}, (user, kind)
            leak = _leak(alert_pattern, listed.text)
            leaks += leak is not None
            assert leak is None, f"{user} ({kind}) reads {leak!r} on /api/alerts"
            jobs = {j["job_id"] for j in client.get("/api/jobs").json()["jobs"]}
            assert jobs == JOBS_SEEN[user], (user, kind, jobs)
        # a token reads exactly what its user reads (no more, no less)
        for url in ("/api/jobs", "/api/alerts", "/api/jobs/4410001", "/api/jobs/4410002"):
            by_basic = clients[(user, "basic")].get(url)
            by_token = clients[(user, "token")].get(url)
            assert by_basic.status_code == by_token.status_code, (user, url)
            if by_basic.status_code == 200:
                assert _identity(by_basic.json()) == _identity(by_token.json()), (user, url)
        matrix[user] = {
            "jobs_seen": sorted(JOBS_SEEN[user]),
            "alerts_seen": sorted(ALERTS_SEEN[user]),
            "principals": ["basic", "read token"],
        }
    matrix["responses_checked"] = responses
    matrix["cross_tenant_reads"] = leaks
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "identity-access-matrix.json").write_text(json.dumps(matrix, indent=2) + "\n")
    assert responses == len(VIEWERS) * 2 * (len(_job_urls()) + 1) and leaks == 0


def _identity(body: Any) -> Any:
    """What a document says about whose data it is (its figures move with the clock while a
    job runs): the keys, and the ids, users, accounts and names anywhere inside."""
    if isinstance(body, dict):
        return {
            k: _identity(v) if isinstance(v, dict | list) else v
            for k, v in body.items()
            if isinstance(v, dict | list) or k in ("job_id", "key", "user", "account", "name")
        } | {"__keys__": sorted(body)}
    if isinstance(body, list):
        return [_identity(v) for v in body]
    return body


def test_tokens_are_listed_to_their_user_and_to_admins_and_auditors(
    clients: dict[tuple[str, str], TestClient],
) -> None:
    everyone = {f"{user}-nightly" for user in VIEWERS}
    for user in VIEWERS:
        by_token = clients[(user, "token")].get("/api/whoami").json()
        assert by_token["authenticated_by"].startswith("token ") and not by_token["may_change"]
        by_basic = clients[(user, "basic")].get("/api/whoami").json()
        assert by_basic["authenticated_by"] == "basic"
        assert by_basic["may_change"] == (user != "audrey")
        for kind in ("basic", "token"):
            body = clients[(user, kind)].get("/api/tokens")
            assert body.status_code == 200
            labels = {t["label"] for t in body.json()["tokens"]}
            expected = everyone if user in ("admin", "audrey") else {f"{user}-nightly"}
            assert labels == expected, (user, kind)
            others = everyone - expected
            assert not any(label in body.text for label in others)
            assert "hps_" in body.text and "secret" not in body.text
            page = clients[(user, "basic")].get("/tokens")  # Basic works on pages too
            assert page.status_code == 200 and not any(label in page.text for label in others)


def _token_id(client: TestClient, user: str) -> str:
    (mine,) = [t for t in client.get("/api/tokens").json()["tokens"] if t["user"] == user]
    return str(mine["token_id"])


def test_read_tokens_change_nothing_and_grant_nothing(
    clients: dict[tuple[str, str], TestClient],
) -> None:
    for user in VIEWERS:
        token = clients[(user, "token")]
        for owner, alert in ALERTS.items():
            response = token.post(f"/api/alerts/{alert.key}/state", json={"state": "resolved"})
            assert response.status_code == 403, (user, owner, response.text)
            assert alert.key not in response.text
        assert token.post("/api/traces/directory", json={"path": "/tmp"}).status_code == 403
        created = token.post("/api/tokens", json={"label": "more", "scope": "read"})
        assert created.status_code == 403, (user, created.text)
    # nothing changed: every alert is still open
    states = {a["state"] for a in clients[("admin", "basic")].get("/api/alerts").json()["alerts"]}
    assert states == {"open"}


def test_the_security_team_acts_on_every_alert_and_the_auditor_on_none(
    clients: dict[tuple[str, str], TestClient],
) -> None:
    sam, audrey = clients[("sam", "basic")], clients[("audrey", "basic")]
    for alert in ALERTS.values():
        assert audrey.post(f"/api/alerts/{alert.key}/state", json={"state": "acknowledged"}
                           ).status_code == 403  # fmt: skip
        changed = sam.post(f"/api/alerts/{alert.key}/state", json={"state": "acknowledged"})
        assert changed.status_code == 200 and changed.json()["state_by"] == "sam"
    # sam reads no job data beyond the alerts
    assert sam.get("/api/jobs/4410001").status_code == 404
    assert sam.get("/api/jobs").json()["jobs"] == []
    assert audrey.get("/metrics").status_code == 200 and sam.get("/metrics").status_code == 403


def test_the_auditor_reads_alerts_with_weight_paths_redacted(
    clients: dict[tuple[str, str], TestClient],
) -> None:
    key = ALERTS["weights"].key
    for kind in ("basic", "token"):
        audited = clients[("audrey", kind)].get("/api/alerts").text
        assert WEIGHTS_FILE not in audited and "/lustre/scratch/checkpoints" not in audited
        assert REDACTED_PATH in audited and key in audited  # the same alert, the same key
        assert "/tmp/payload-4410001" in audited  # other paths stay
        page = clients[("audrey", kind)].get("/alerts", follow_redirects=False)
        if kind == "basic":
            assert WEIGHTS_FILE not in page.text and REDACTED_PATH in page.text
    for user in ("admin", "sam", "bob"):
        assert WEIGHTS_FILE in clients[(user, "basic")].get("/api/alerts").text


def test_an_admin_token_acts_and_grants_only_what_admins_do(
    clients: dict[tuple[str, str], TestClient], identity_service: Service
) -> None:
    admin = clients[("admin", "basic")]
    made = admin.post("/api/tokens", json={"label": "ops", "scope": "admin", "expires_days": 7})
    assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
    app = create_app(identity_service)
    with TestClient(app, headers={"Authorization": f"Bearer {made.json()['secret']}"}) as ops:
        key = ALERTS["alice"].key
        assert ops.post(f"/api/alerts/{key}/state", json={"state": "resolved"}).status_code == 200
        child = ops.post("/api/tokens", json={"label": "for bob", "scope": "read", "user": "bob"})
        assert child.status_code == 201 and child.json()["token"]["user"] == "bob"
    for user in ("alice", "carol", "sam", "audrey"):
        denied = clients[(user, "basic")].post("/api/tokens", json={"label": "x", "scope": "admin"})
        assert denied.status_code == 403, user
        other = clients[(user, "basic")].post(
            "/api/tokens", json={"label": "x", "scope": "read", "user": "alice"}
        )
        assert other.status_code == (201 if user == "alice" else 403), user
    assert admin.post("/api/tokens", json={"label": "x", "expires_days": 400}).status_code == 400
    assert admin.post("/api/tokens", json={"label": "x", "scope": "root"}).status_code == 400


def test_revoking_expiring_and_where_tokens_are_refused(
    clients: dict[tuple[str, str], TestClient], identity_service: Service
) -> None:
    alice, bob = clients[("alice", "basic")], clients[("bob", "basic")]
    alice_token = clients[("alice", "token")]
    # a token opens no page: pages are for sessions (and their CSRF rule)
    page = alice_token.get("/jobs", follow_redirects=False)
    assert page.status_code == 303 and "/login" in page.headers["location"]
    # other people's tokens are not there (404), the auditor's listing changes nothing (403)
    bobs = _token_id(bob, "bob")
    assert alice.post(f"/api/tokens/{bobs}/revoke").status_code == 404
    assert clients[("audrey", "basic")].post(f"/api/tokens/{bobs}/revoke").status_code == 403
    assert clients[("bob", "token")].get("/api/jobs").status_code == 200
    # a read token may revoke itself
    alices = _token_id(alice, "alice")
    revoked = alice_token.post(f"/api/tokens/{alices}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert alice_token.get("/api/jobs").status_code == 401
    assert alice_token.get("/api/whoami").status_code == 401
    # an admin revokes anybody's
    assert clients[("admin", "basic")].post(f"/api/tokens/{bobs}/revoke").status_code == 200
    assert clients[("bob", "token")].get("/api/jobs").status_code == 401
    # expiry: a token of 50 ms
    short = alice.post("/api/tokens", json={"label": "brief", "expires_days": 0.05 / 86400})
    assert short.status_code == 201
    time.sleep(0.1)
    app = create_app(identity_service)
    with TestClient(app, headers={"Authorization": f"Bearer {short.json()['secret']}"}) as late:
        assert late.get("/api/jobs").status_code == 401
    listed = {t["label"]: t["status"] for t in alice.get("/api/tokens").json()["tokens"]}
    assert listed == {"alice-nightly": "revoked", "brief": "expired"}
    # a forged token with a valid shape gets nothing either
    with TestClient(app, headers={"Authorization": "Bearer hps_" + "A" * 46}) as forged:
        assert forged.get("/api/jobs").status_code == 401


def test_the_tokens_page_shows_a_new_secret_once(identity_service: Service) -> None:
    app = create_app(identity_service)
    with TestClient(app, headers={"Origin": "http://testserver"}) as browser:
        login = browser.post(
            "/login",
            data={"username": "carol", "password": PASSWORDS["carol"], "next": "/tokens"},
            follow_redirects=False,
        )
        assert login.status_code == 303
        page = browser.get("/tokens")
        assert page.status_code == 200 and 'value="admin"' not in page.text
        made = browser.post("/tokens", data={"label": "weekly report", "scope": "read"})
        assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
        secret = re.search(r"hps_[0-9A-Za-z]{46}", made.text)
        assert secret is not None
        again = browser.get("/tokens")
        assert secret.group(0) not in again.text and "weekly report" in again.text
        token_id = secret.group(0)[4:12]
        assert f"/tokens/{token_id}/revoke" in again.text
        # the form posts obey the CSRF rule: another origin is refused
        foreign = browser.post(
            f"/tokens/{token_id}/revoke", headers={"Origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        gone = browser.post(f"/tokens/{token_id}/revoke", follow_redirects=False)
        assert gone.status_code == 303
        assert "revoked" in browser.get("/tokens").text


def test_pages_for_the_new_roles_show_no_job_outside_their_scope(
    clients: dict[tuple[str, str], TestClient], identity_service: Service
) -> None:
    """The diagram matrix's every page, fragment and card, and the other pages, for sam and
    audrey (the original roles' pages are covered by tests/serve/test_diagram_access.py)."""
    pages = [*diagram_urls(identity_service), "/", "/jobs", "/alerts", "/tokens", "/traces"]
    pages += [f"/jobs/{job}" for job in JOB_TOKENS]
    checked = 0
    for user in ("sam", "audrey"):
        client = clients[(user, "basic")]
        shown: set[str] = set()
        for url in pages:
            response = client.get(url, follow_redirects=False)
            job = url.split("/")[2] if url.startswith("/jobs/") else None
            expected = 404 if job is not None and job not in JOBS_SEEN[user] else 200
            assert response.status_code == expected, (user, url, response.status_code)
            seen = JOBS_SEEN[user]
            if url == "/alerts":  # the alerts page names the jobs of the alerts it lists
                seen = seen | {OWNER_JOB[o] for o in ALERTS_SEEN[user] if o in OWNER_JOB}
            text = response.text.replace(job, "") if expected == 404 and job else response.text
            shown |= {job for job in JOB_TOKENS if re.search(rf"\b{job}\b", text)}
            leak = _leak(_pattern(_forbidden(seen)), text)
            assert leak is None, f"{user} reads {leak!r} on {url}"
            checked += 1
        # the check can fail: the auditor's pages do show every job, sam's only the alerts' jobs
        alert_jobs = {OWNER_JOB[o] for o in ALERTS_SEEN[user] if o in OWNER_JOB}
        assert shown == (set(JOB_TOKENS) if user == "audrey" else alert_jobs), (user, shown)
    assert checked == 2 * len(pages)
