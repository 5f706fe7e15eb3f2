"""hpcscope's alerts reach a real Alertmanager (Debian ``prometheus-alertmanager``, started
here) through its v2 API: labels, re-sends while open, ``endsAt`` on resolve; Alertmanager's
own webhook receiver then gets the firing and the resolved notification."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.notify.alertmanager import AlertmanagerClient, AlertmanagerForwarder
from hpcscope.service.notify.delivery import DeliveryError
from hpcscope.store import notify as notify_store
from hpcscope.store.alerts import set_alert_state, upsert_alerts
from tests.support.notify_servers import (
    Alertmanager,
    Webhook,
    alertmanager,
    wait_for,
    webhook_server,
)
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e


def config(hook: Webhook) -> str:
    return f"""
route:
  receiver: hook
  group_by: [dedup_key]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {hook.url}
        send_resolved: true
"""


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Alertmanager, Webhook]]:
    with webhook_server() as hook, alertmanager(tmp_path / "am", config(hook)) as am:
        yield am, hook


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _alerts(now: datetime) -> list[Alert]:
    """Two open alerts last seen ``now``: taken when the test runs, not at import (Alertmanager
    drops an alert whose endsAt is past, and a full suite reaches this test minutes later)."""
    return [
        Alert(
            rule_id="SC-2",
            vector=Vector.SUPPLY_CHAIN,
            severity=Severity.CRITICAL,
            title="Unsafe pickle loaded by rank 0",
            first_seen=now - timedelta(minutes=3),
            last_seen=now,
            node="gpu01",
            job_id="4410001",
            user="alice",
            account="vision",
            gpu=0,
            subject="rank 0",
            evidence=(Evidence("torch.load of /scratch/m.pt with GLOBAL os.system", "falco"),),
        ),
        Alert(
            rule_id="RD-4",
            vector=Vector.RDMA,
            severity=Severity.HIGH,
            title="RDMA traffic to an unknown subnet",
            first_seen=now - timedelta(minutes=1),
            last_seen=now,
            node="gpu02",
        ),
    ]


def _labels(found: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {a["labels"]["rule_id"]: a["labels"] for a in found}


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).replace(tzinfo=None)


def test_open_alerts_fire_resend_and_resolve(
    service: Service, running: tuple[Alertmanager, Webhook]
) -> None:
    am, hook = running
    now = utcnow()  # the test's fixed now
    alerts = _alerts(now)
    upsert_alerts(service.store, alerts).result()
    clock = Clock(now)
    forwarder = AlertmanagerForwarder(
        service.store, AlertmanagerClient(am.url), resend_seconds=60, now=clock,
        public_url="https://hpcscope.example.org",
    )  # fmt: skip
    assert forwarder.forward_once() == 2
    found = am.alerts()
    labels = _labels(found)
    assert labels["SC-2"] == {
        "alertname": "HpcscopeAlert",
        "rule_id": "SC-2",
        "vector": "supply-chain",
        "severity": "critical",
        "node": "gpu01",
        "job_id": "4410001",
        "user": "alice",
        "account": "vision",
        "gpu": "0",
        "dedup_key": alerts[0].key,
    }
    assert labels["RD-4"]["vector"] == "rdma-blind-spot" and "job_id" not in labels["RD-4"]
    sc2 = next(a for a in found if a["labels"]["rule_id"] == "SC-2")
    assert sc2["status"]["state"] == "active"
    assert sc2["annotations"]["summary"] == "Unsafe pickle loaded by rank 0"
    assert sc2["generatorURL"] == "https://hpcscope.example.org/alerts?job=4410001"
    assert abs((_parse(str(sc2["endsAt"])) - (now + timedelta(minutes=4))).total_seconds()) < 2
    # Alertmanager routes them to its receiver
    wait_for(lambda: len(hook.posts) >= 2, what="firing notifications")
    assert {p["status"] for p in hook.posts} == {"firing"}
    # not yet due: nothing re-sent; a resend interval later both are re-sent, endsAt moved on
    assert forwarder.forward_once() == 0
    clock.now = now + timedelta(seconds=60)
    assert forwarder.forward_once() == 2
    again = next(a for a in am.alerts() if a["labels"]["rule_id"] == "SC-2")
    assert abs((_parse(str(again["endsAt"])) - (now + timedelta(minutes=5))).total_seconds()) < 2
    # resolved in hpcscope: sent once with endsAt = when it was resolved; Alertmanager resolves
    resolved_at = utcnow()
    set_alert_state(service.store, alerts[0].key, AlertState.RESOLVED, by="admin",
                    at=resolved_at).result()  # fmt: skip
    clock.now = now + timedelta(seconds=70)
    assert forwarder.forward_once() == 1
    assert [a["labels"]["rule_id"] for a in am.alerts()] == ["RD-4"]
    wait_for(
        lambda: any(p["status"] == "resolved" for p in hook.posts), what="resolved notification"
    )
    done = next(p for p in hook.posts if p["status"] == "resolved")
    assert [a["labels"]["rule_id"] for a in done["alerts"]] == ["SC-2"]
    assert abs((_parse(done["alerts"][0]["endsAt"]) - resolved_at).total_seconds()) < 1
    assert forwarder.forward_once() == 0  # the resolve is sent once
    audit = [
        (e.rule_id, e.outcome, e.detail.split(" (")[0])
        for e in reversed(notify_store.audit_log(service.store))
    ]
    assert sorted(audit[:2]) == [("RD-4", "sent", "firing: first send"),
                                 ("SC-2", "sent", "firing: first send")]  # fmt: skip
    assert audit[2:] == [("SC-2", "sent", "resolved: endsAt sent")]


def test_an_unreachable_alertmanager_is_audited_once(service: Service) -> None:
    upsert_alerts(service.store, _alerts(utcnow())).result()
    client = AlertmanagerClient(f"http://127.0.0.1:{free_port()}", timeout_seconds=1)
    with pytest.raises(DeliveryError):
        client.post([{"labels": {"alertname": "x"}}])
    forwarder = AlertmanagerForwarder(service.store, client, resend_seconds=1)
    assert forwarder.forward_once() == 0
    assert forwarder.forward_once() == 0
    failed = [e for e in notify_store.audit_log(service.store) if e.outcome == "failed"]
    assert len(failed) == 1 and failed[0].channel == "alertmanager"
