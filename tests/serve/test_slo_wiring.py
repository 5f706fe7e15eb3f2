"""The server's collector hooks evaluate the SLOs into the alert engine after the upkeep."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from fastapi.testclient import TestClient

from hpcscope.model.access import JobScope
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.server import after_cycle_hooks
from hpcscope.service.core import Service
from hpcscope.store.alerts import alerts
from tests.service.slo.test_engine import bad_hour


def test_a_bad_hour_reaches_the_alert_engine_through_the_collector_hooks(
    service: Service,
) -> None:
    service.store.upsert_jobs(bad_hour(end=utcnow() - timedelta(seconds=30))).result()
    hooks = after_cycle_hooks(service)
    upkeep, job_documents, job_views, ahead, telemetry, slo, alert_owners, publish = hooks
    assert publish == service.snapshots.publish  # last: the read snapshots see the cycle
    upkeep()  # summaries and retention first
    job_documents()  # finished jobs' time series, on a thread of their own
    job_views()  # and their page parts
    ahead()  # the reports kept ahead of their readers
    telemetry()
    assert slo() == 1
    alert_owners()  # the owners of the jobs with alerts, read before the cycle is published
    (alert,) = alerts(service.store, JobScope(all_jobs=True))
    assert (alert.rule_id, alert.subject) == ("SLO-PAGE", "job_success")


def test_an_empty_store_has_quiet_slos(service: Service) -> None:
    *_, slo, _owners, _publish = after_cycle_hooks(service)
    assert slo() == 0
    assert alerts(service.store, JobScope(all_jobs=True)) == []


def test_the_page_and_api_of_an_empty_store(client_as: Callable[[str], TestClient]) -> None:
    alice = client_as("alice")
    document = alice.get("/api/slo").json()
    assert document["scope"] == "own jobs" and document["queue_waits"] == []
    for slo in document["slos"]:
        assert (slo["total"], slo["sli_ratio"], slo["budget_remaining_ratio"]) == (0, None, 1.0)
        assert all(b["burn_rate"] is None for b in slo["burns"])
        assert not any(a["firing"] for a in slo["alerts"])
    page = alice.get("/slo")
    assert page.status_code == 200
    assert "No job visible to you started in the window." in page.text
