"""Every polled GET is a kept answer, with the access control of its route, as a matrix.

One service holds the fleet (``tests/support/fleet.py``), alerts on three users' jobs and one on
none, access records of a checkpoint, and a trace analysis per user. Every kept route
(``serve/kept.py``) is asked by every kind of viewer: alice, bob and dave (researchers), carol
(team lead of vision and nlp), sam (security), audrey (auditor) and admin, the widest scopes
first, so that the snapshots hold wider answers than the next viewer may see. For each:

* the read lane's answer is the app's without it (status, headers, body), by session cookie
  and by HTTP Basic;
* no answer names a job outside the viewer's scope (for the roles that see all alerts or
  access records, their documents may: that is their role);
* asking again computes nothing (the answers are kept, not recomputed per request);
* a kept document equals a fresh computation after the snapshots are cleared;
* a write between two cycles (an alert acknowledged, a trace linked) shows at the next read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.model.file_access import FILE_ACCESS_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.model.trace_analysis import StoredAnalysis
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.store import traces as trace_store
from hpcscope.store.alerts import upsert_alerts
from hpcscope.store.file_access import append_file_access
from tests.serve.test_access_records import RECORDS
from tests.serve.test_access_records import SEES as ACCESS_SEES
from tests.serve.test_alerts_access import ALERTS
from tests.support.fleet import JOBS, write_fleet
from tests.support.identity import PASSWORDS, identity_users

#: Researchers and the team lead first: their scopes are narrower than the admin's, which is
#: asked first in the matrix.
VIEWERS = ("admin", "sam", "audrey", "carol", "alice", "bob", "dave")
ACCOUNT_OF = {job[0]: job[3] for job in JOBS}
USER_OF = {job[0]: job[2] for job in JOBS}
#: viewer -> the jobs in their scope
SCOPE = {
    "admin": set(USER_OF),
    "sam": set(USER_OF),
    "audrey": set(USER_OF),
    "carol": {j for j, account in ACCOUNT_OF.items() if account in ("vision", "nlp")},
    "alice": {j for j, user in USER_OF.items() if user == "alice"},
    "bob": {j for j, user in USER_OF.items() if user == "bob"},
    "dave": {j for j, user in USER_OF.items() if user == "dave"},
}
CHECKPOINT = "/lustre/checkpoints/run-a"
KEPT_PATHS = [
    "/",
    "/fragments/overview",
    "/api/cluster",
    "/slo",
    "/api/slo",
    "/chargeback",
    "/api/chargeback",
    "/api/chargeback?by=user",
    "/alerts",
    "/api/alerts",
    "/api/alerts?severity=HIGH&state=open",
    f"/access?path={CHECKPOINT}",
    f"/api/access?path={CHECKPOINT}",
    f"/api/access?path={CHECKPOINT}&limit=2",
    "/traces",
    "/api/traces",
    "/jobs",
]
#: Kept paths whose answers may name any job for a role that sees all of them.
ROLE_WIDE = {"/alerts", "/api/alerts", "/api/alerts?severity=HIGH&state=open"}
#: viewer -> command lines an access report must not show (of records they do not see, or see
#: redacted: tests/serve/test_access_records.py, which also names the jobs each viewer sees)
HIDDEN_ARGUMENTS = {
    user: {str(r["arguments"]).split()[-1] for r in RECORDS.values()}
    - {str(RECORDS[k]["arguments"]).split()[-1] for k in seen - redacted}
    for user, (seen, redacted) in ACCESS_SEES.items()
}


def _analysis(number: int, job_id: str) -> StoredAnalysis:
    user, account = USER_OF[job_id], ACCOUNT_OF[job_id]
    return StoredAnalysis(
        analysis_id=f"a{number}",
        owner_user=user,
        owner_accounts=(account,),
        job_id=job_id,
        account=account,
        created=utcnow().replace(tzinfo=None) - timedelta(minutes=number),
        source_names=(f"trace-of-{job_id}.json",),
        ranks=2,
        steps=3,
        partial=False,
        slowdown=1.2,
        straggler_ranks=(1,),
        window_start=None,
        window_end=None,
        result_json="{}",
    )


@pytest.fixture
def kept(tmp_path: Any) -> Iterator[tuple[Service, TestClient, TestClient]]:
    settings = Settings(store_path=tmp_path / "store.duckdb", secret_key="test-secret")
    service = Service.open(settings, users=identity_users())
    now = utcnow()
    write_fleet(service.store, now=now)
    upsert_alerts(service.store, list(ALERTS.values())).result()
    records = pa.Table.from_pylist(list(RECORDS.values()), schema=FILE_ACCESS_SCHEMA)
    append_file_access(service.store, records).result()
    for number, job_id in enumerate(("4410001", "4410002", "4410003")):
        trace_store.insert_analysis(service.store, _analysis(number, job_id))
    origin = {"Origin": "http://testserver"}
    with (
        TestClient(create_app(service, read_lane=False), headers=origin) as plain,
        TestClient(create_app(service), headers=origin) as laned,
    ):
        yield service, plain, laned
    service.close()


def _login(client: TestClient, user: str) -> dict[str, str]:
    response = client.post(
        "/login",
        data={"username": user, "password": PASSWORDS[user], "next": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    return {"Cookie": response.headers["set-cookie"].split(";", 1)[0]}


def _basic(user: str) -> dict[str, str]:
    import base64

    secret = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {secret}"}


#: Documents whose every figure is fixed by the stored rows (no clock in them).
_TIMELESS = ("/api/alerts", "/api/access", "/api/traces")


def _named(text: str) -> set[str]:
    """The jobs and accounts a document names."""
    return {name for name in (*USER_OF, *ACCOUNT_OF.values()) if name in text}


def test_every_kept_route_answers_each_viewer_within_their_scope(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    _, plain, laned = kept
    cells = 0
    for user in VIEWERS:
        for headers in (_login(plain, user), _basic(user)):
            for path in KEPT_PATHS:
                want = plain.get(path, headers=headers, follow_redirects=False)
                got = laned.get(path, headers=headers, follow_redirects=False)
                assert want.status_code == 200, (user, path, want.text[:300])
                assert (got.status_code, got.headers.items(), got.content) == (
                    want.status_code,
                    want.headers.items(),
                    want.content,
                ), (user, path)
                if "access" in path:  # who read my paths: by path, not by job scope
                    hidden = HIDDEN_ARGUMENTS.get(user, set())
                    assert not {arg for arg in hidden if arg in got.text}, (user, path)
                elif not (path in ROLE_WIDE and SCOPE[user] == set(USER_OF)):
                    named = {job for job in USER_OF if job in got.text}
                    assert named <= SCOPE[user], (user, path, named - SCOPE[user])
                cells += 1
    assert cells == len(VIEWERS) * 2 * len(KEPT_PATHS)


def test_asking_again_computes_nothing_and_kept_equals_fresh(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    service, plain, laned = kept
    for user in ("admin", "carol", "alice"):
        headers = _login(plain, user)
        first = {path: laned.get(path, headers=headers) for path in KEPT_PATHS}
        computed = service.snapshots.computations
        again = {path: laned.get(path, headers=headers) for path in KEPT_PATHS}
        assert service.snapshots.computations == computed, user
        assert {p: r.content for p, r in again.items()} == {p: r.content for p, r in first.items()}
        service.snapshots.clear()
        for path in (p for p in KEPT_PATHS if p.startswith("/api/")):
            fresh = plain.get(path, headers=headers)
            if any(path.startswith(p) for p in _TIMELESS):
                assert fresh.json() == first[path].json(), (user, path)
            else:  # figures that move with the clock: the same jobs and accounts named
                assert _named(fresh.text) == _named(first[path].text), (user, path)


def test_a_write_between_cycles_shows_at_the_next_read(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    service, plain, laned = kept
    service.snapshots.publish()  # a collector: a generation per cycle, and none in this test
    alice = _login(plain, "alice")
    (alert,) = laned.get("/api/alerts", headers=alice).json()["alerts"]
    assert alert["state"] == "open"
    changed = laned.post(
        f"/api/alerts/{alert['key']}/state", json={"state": "acknowledged"}, headers=alice
    )
    assert changed.status_code == 200
    (after,) = laned.get("/api/alerts", headers=alice).json()["alerts"]
    assert after["state"] == "acknowledged"

    (analysis,) = laned.get("/api/traces", headers=alice).json()["analyses"]
    linked = laned.post(
        f"/api/traces/{analysis['analysis_id']}/link", json={"job_id": ""}, headers=alice
    )
    assert linked.status_code == 200
    (unlinked,) = laned.get("/api/traces", headers=alice).json()["analyses"]
    assert unlinked["job_id"] is None


def test_an_alert_the_security_engine_writes_between_cycles_shows_at_the_next_read(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """The security engine's own loop writes alerts between the collector's cycles: the kept
    alert lists must not wait for the next cycle to show them (the detection delay)."""
    service, plain, laned = kept
    service.snapshots.publish()
    admin = _login(plain, "admin")
    before = {a["key"] for a in laned.get("/api/alerts", headers=admin).json()["alerts"]}
    (known,) = laned.get("/api/alerts", headers=_login(plain, "alice")).json()["alerts"]
    new = Alert(
        rule_id="CE-3",
        vector=Vector.CONTAINER_ESCAPE,
        severity=Severity.HIGH,
        title="nsenter into PID 1's namespaces",
        first_seen=datetime(2026, 12, 1, 12),
        last_seen=datetime(2026, 12, 1, 12),
        node="gpu01",
        subject="nsenter",
    )
    upsert_alerts(service.store, [new]).result()
    after = {a["key"] for a in laned.get("/api/alerts", headers=admin).json()["alerts"]}
    assert after == before | {new.key} and known["key"] in before


def test_an_alert_on_one_job_leaves_the_other_jobs_pages_kept(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """A job's page and document key on their own job's alerts: the security engine's alerts
    on one job (several a second under attack) do not render every other job's page again,
    and the job the alert is on shows it at the next read."""
    service, plain, laned = kept
    service.snapshots.publish()
    admin = _login(plain, "admin")
    one, other = sorted(SCOPE["alice"])[:2]
    paths = [f"/jobs/{other}", f"/api/jobs/{other}", f"/api/jobs/{one}"]
    for path in paths:
        assert laned.get(path, headers=admin).status_code == 200
    new = Alert(
        rule_id="CE-3",
        vector=Vector.CONTAINER_ESCAPE,
        severity=Severity.HIGH,
        title="nsenter into PID 1's namespaces",
        first_seen=datetime(2026, 12, 1, 12),
        last_seen=datetime(2026, 12, 1, 12),
        node="gpu01",
        job_id=one,
        subject="nsenter",
    )
    upsert_alerts(service.store, [new]).result()
    computed = service.snapshots.computations
    for path in paths[:2]:
        assert laned.get(path, headers=admin).status_code == 200
    assert service.snapshots.computations == computed  # the other job's answers: kept
    shown = laned.get(f"/api/jobs/{one}", headers=admin).json()
    assert new.key in {a["key"] for a in shown["alerts"]}


def test_what_is_kept_of_a_finished_job_stays_current_for_a_minute(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """A running job's visibility, phases and alerts are checked once per generation; a
    finished job's, whose record no longer changes, at most every minute (as its report)."""
    from hpcscope.model.access import Principal, Role
    from hpcscope.model.schemas import JOB_SCHEMA
    from hpcscope.service.core import FINISHED_JOB_SECONDS

    service, _, _ = kept
    admin = Principal(name="admin", role=Role.ADMIN)
    running = service.visible_job(admin, "4410001")
    assert running is not None and not running.ended and running.every_seconds == 0.0
    record = dict.fromkeys(JOB_SCHEMA.names) | {
        "job_id": "4410009",
        "user": "alice",
        "account": "vision",
        "state": "COMPLETED",
        "start_time": datetime(2026, 12, 1, 10),
        "end_time": datetime(2026, 12, 1, 11),
        "source": "test-fleet",
    }
    service.store.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA))
    service.store.flush()
    finished = service.visible_job(admin, "4410009")
    assert finished is not None and finished.ended
    assert finished.every_seconds == FINISHED_JOB_SECONDS


def test_a_jobs_documents_are_kept_once_and_only_for_who_may_see_it(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """A job's time series, phases and alerts are kept per job (alerts per alert scope too)
    after the access check: asked again, nothing is computed; someone outside the job's scope
    gets 404 from the same keys."""
    service, plain, laned = kept
    service.snapshots.publish()
    job = sorted(SCOPE["alice"])[0]
    paths = [f"/api/jobs/{job}/{part}" for part in ("timeseries", "phases", "alerts")]
    alice, bob = _login(plain, "alice"), _login(plain, "bob")
    first = {path: laned.get(path, headers=alice) for path in paths}
    assert all(r.status_code == 200 for r in first.values()), first
    computed = service.snapshots.computations
    again = {path: laned.get(path, headers=alice) for path in paths}
    assert service.snapshots.computations == computed
    assert {p: r.content for p, r in again.items()} == {p: r.content for p, r in first.items()}
    for path in paths:
        assert laned.get(path, headers=bob).status_code == 404, path
        etag = first[path].headers["etag"]
        assert laned.get(path, headers={**alice, "If-None-Match": etag}).status_code == 304


def test_a_kept_page_comes_with_its_etag_and_is_not_sent_again_unchanged(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """Every kept page answers 200 with its ETag and ``no-cache``, and 304 without a body
    to a client that sends it back; each reader's page is its own (their name is on it)."""
    _, plain, laned = kept
    alice, carol = _login(plain, "alice"), _login(plain, "carol")
    pages = [p for p in KEPT_PATHS if not p.startswith("/api/")] + ["/diagram"]
    for path in pages:
        first = laned.get(path, headers=alice)
        etag = first.headers["etag"]
        assert first.status_code == 200 and first.headers["cache-control"] == "no-cache", path
        again = laned.get(path, headers={**alice, "If-None-Match": etag})
        assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
        other = laned.get(path, headers={**carol, "If-None-Match": etag})
        assert other.status_code == 200 and other.headers["etag"] != etag, path


def test_the_overview_page_holds_its_live_part_as_kept(
    kept: tuple[Service, TestClient, TestClient],
) -> None:
    """The overview page is its reader's header around the live part kept for their
    visibility: the part is rendered once, for the page and its polls alike."""
    service, plain, laned = kept
    alice = _login(plain, "alice")
    service.snapshots.clear()
    page = laned.get("/", headers=alice)
    computed = service.snapshots.computations
    live = laned.get("/fragments/overview", headers=alice)
    assert service.snapshots.computations == computed  # kept by the page already
    assert live.status_code == page.status_code == 200
    assert live.content in page.content and b'id="overview-live"' in live.content
