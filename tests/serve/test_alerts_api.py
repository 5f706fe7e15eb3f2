"""``/api/alerts`` and acknowledging/resolving: visible alerts only, who and when recorded."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.store.alerts import upsert_alerts
from tests.support.data import populate

T = datetime(2026, 11, 29, 12, 0, 0)


def _alert(job: str, severity: Severity = Severity.HIGH) -> Alert:
    return Alert(
        "GI-1", Vector.GRADIENT_INJECTION, severity, "outlier", T, T, node="gpu01", job_id=job,
        gpu=0, subject="rank 0", step=3, evidence=(Evidence("step 3", "/spool/x", "line 4"),),
    )  # fmt: skip


@pytest.fixture
def stored(service: Service) -> dict[str, str]:
    populate(service.store, now=utcnow())  # 101 alice, 102 bob, 103 dave
    alerts = {"101": _alert("101"), "102": _alert("102", Severity.CRITICAL), "103": _alert("103")}
    upsert_alerts(service.store, list(alerts.values())).result()
    return {job: alert.key for job, alert in alerts.items()}


VISIBLE = {
    "alice": {"101"},
    "bob": {"102"},
    "carol": {"101", "102"},
    "admin": {"101", "102", "103"},
}


@pytest.mark.parametrize(("user", "visible"), sorted(VISIBLE.items()))
def test_alert_list_is_scoped(
    stored: dict[str, str], client_as: Callable[[str], TestClient], user: str, visible: set[str]
) -> None:
    body = client_as(user).get("/api/alerts").json()
    assert {a["job_id"] for a in body["alerts"]} == visible
    critical = client_as(user).get("/api/alerts", params={"severity": "critical"}).json()
    assert {a["job_id"] for a in critical["alerts"]} == visible & {"102"}
    assert client_as(user).get("/api/alerts", params={"state": "sleepy"}).status_code == 400


def test_acknowledge_and_resolve_own_alerts_only(
    stored: dict[str, str], client_as: Callable[[str], TestClient]
) -> None:
    bob = client_as("bob")
    acked = bob.post(f"/api/alerts/{stored['102']}/state", json={"state": "acknowledged"})
    assert acked.status_code == 200
    assert (acked.json()["state"], acked.json()["state_by"]) == ("acknowledged", "bob")
    assert acked.json()["state_at"] is not None
    # alice's alert: as unknown to bob as a key that does not exist
    assert (
        bob.post(f"/api/alerts/{stored['101']}/state", json={"state": "resolved"}).status_code
        == 404
    )
    assert bob.post("/api/alerts/nope/state", json={"state": "resolved"}).status_code == 404
    assert bob.post(f"/api/alerts/{stored['102']}/state", json={"state": "gone"}).status_code == 400
    open_ = client_as("admin").get("/api/alerts", params={"state": "open"}).json()["alerts"]
    assert {a["job_id"] for a in open_} == {"101", "103"}
    resolved = client_as("admin").post(
        f"/api/alerts/{stored['103']}/state", json={"state": "resolved"}
    )
    assert resolved.json()["state_by"] == "admin"
