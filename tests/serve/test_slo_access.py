"""Who sees which SLO figures: ``/slo``, ``/api/slo`` and the SLO alerts, for alice, bob and
dave (researchers), carol (team lead of vision and nlp), admin and an anonymous visitor.

Each viewer's figures are exactly those computed over their scope (own jobs, coordinated
accounts, cluster), and no response names another tenant's account, user or job (0
cross-tenant reads). The burn-rate alerts (no job) are an admin's only. The matrix is also
written to ``test-artifacts/slo-access-matrix.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.report import report_for_scope
from hpcscope.store.alerts import upsert_alerts
from tests.serve.test_diagram_access import logged_in
from tests.service.slo.sacct_history import USERS, load_history, sacct_history
from tests.support.paths import ARTIFACTS

VIEWERS = ("admin", "alice", "bob", "dave", "carol")
#: viewer -> the accounts whose jobs are in their scope (erin is in vision, not a login)
ACCOUNTS = {
    "admin": {"vision", "nlp", "speech"},
    "alice": {"vision"},
    "bob": {"nlp"},
    "dave": {"speech"},
    "carol": {"vision", "nlp"},
}
SCOPES = {
    "admin": JobScope(all_jobs=True),
    "alice": JobScope(all_jobs=False, users=frozenset({"alice"})),
    "bob": JobScope(all_jobs=False, users=frozenset({"bob"})),
    "dave": JobScope(all_jobs=False, users=frozenset({"dave"})),
    "carol": JobScope(
        all_jobs=False, users=frozenset({"carol"}), accounts=frozenset({"vision", "nlp"})
    ),
}


@pytest.fixture
def clients(service: Service) -> Iterator[dict[str | None, TestClient]]:
    # the month ends a day ago: every event is fixed whatever the clock says during the test
    now = utcnow() - timedelta(days=1)
    load_history(service.store, sacct_history(now=now), now=now)
    made = {user: logged_in(service, user) for user in (*VIEWERS, None)}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _figures(document: dict[str, Any]) -> dict[str, Any]:
    """What must match: everything but the clock and the history's bucket boundaries."""
    return {
        "scope": document["scope"],
        "slos": [
            {k: v for k, v in s.items() if k != "history"}
            | {"history_totals": sum(h["total"] for h in s["history"])}
            for s in document["slos"]
        ],
        "queue_waits": document["queue_waits"],
        "ended_jobs_by_cause": document["ended_jobs_by_cause"],
        "accounts": document["accounts"],
    }


def test_each_viewer_gets_the_figures_of_their_scope(
    service: Service, clients: dict[str | None, TestClient]
) -> None:
    config = SloConfig.from_settings(service.settings)
    matrix: dict[str, Any] = {}
    leaks = 0
    totals = {}
    for user in VIEWERS:
        client = clients[user]
        api = client.get("/api/slo")
        page = client.get("/slo")
        assert api.status_code == 200 and page.status_code == 200, user
        document = api.json()
        scope_name = {"admin": "cluster", "carol": "accounts"}.get(user, "own jobs")
        expected = report_for_scope(
            service.store, config, SCOPES[user], scope=scope_name, now=utcnow()
        ).model_dump(mode="json")
        assert _figures(document) == _figures(expected), user
        assert {a["account"] for a in document["accounts"]} == ACCOUNTS[user]
        hidden_accounts = {"vision", "nlp", "speech"} - ACCOUNTS[user]
        others = set(USERS) - {user}
        for text in (api.text, page.text):
            leaks += any(f'"account":"{a}"' in text or f">{a}<" in text for a in hidden_accounts)
            leaks += any(re.search(rf"\b{o}\b", text) for o in others)
            leaks += bool(re.search(r"\b5100\d{3}\b", text))  # no job id at all
        totals[user] = {s["slo"]: s["total"] for s in document["slos"]}
        matrix[user] = {
            "scope": document["scope"],
            "accounts": sorted(a["account"] for a in document["accounts"]),
            "events": totals[user],
        }
    assert leaks == 0
    # the scopes really differ: a researcher's events are a strict part of the cluster's
    for user in ("alice", "bob", "dave"):
        for slo, total in totals[user].items():
            assert 0 < total < totals["admin"][slo], (user, slo)
    assert totals["carol"]["job_success"] > totals["alice"]["job_success"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "slo-access-matrix.json").write_text(json.dumps(matrix, indent=2) + "\n")


def test_anonymous_visitors_see_no_slo(clients: dict[str | None, TestClient]) -> None:
    anonymous = clients[None]
    assert anonymous.get("/api/slo").status_code == 401
    page = anonymous.get("/slo", follow_redirects=False)
    assert page.status_code in (302, 303, 307) and "/login" in page.headers["location"]
    assert anonymous.get("/metrics").status_code == 401


def test_burn_rate_alerts_and_metrics_are_admins_only(
    service: Service, clients: dict[str | None, TestClient]
) -> None:
    now = utcnow()
    burn = Alert("SLO-PAGE", Vector.SERVICE_LEVEL, Severity.CRITICAL, "Successful jobs: burning",
                 now, now, subject="job_success")  # fmt: skip
    upsert_alerts(service.store, [burn]).result()
    for user in VIEWERS:
        keys = {a["key"] for a in clients[user].get("/api/alerts").json()["alerts"]}
        assert (burn.key in keys) == (user == "admin"), user
        page = clients[user].get("/alerts")
        assert ("SLO-PAGE" in page.text) == (user == "admin"), user
        metrics = clients[user].get("/metrics")
        assert metrics.status_code == (200 if user == "admin" else 403), user
    admin_page = clients["admin"].get("/alerts").text
    assert "service-level" in admin_page
