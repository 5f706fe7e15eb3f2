"""Delivery of hpcscope's alerts to a real Alertmanager through its v2 API.

Every alert in the ``alerts`` table (security, integrity, any rule that writes there) that is
open or acknowledged is ``POST``ed to ``<alertmanager_url>/api/v2/alerts`` with its labels
(``alertname="HpcscopeAlert"``, ``rule_id``, ``vector``, ``severity``, ``node``, ``job_id``,
``user``, ``account``, ``gpu``, ``dedup_key``) and annotations (``summary``, ``description``,
``state``, ``count``). Alertmanager's contract is the one Prometheus keeps: a firing alert is
re-sent while it fires (every ``alertmanager_resend_seconds``), with ``endsAt`` four resend
intervals ahead, so an alert hpcscope stops sending (the server is down) resolves by itself;
an alert resolved in hpcscope is sent once more with ``endsAt`` = the time it was resolved.
A new alert goes out on the cycle it is first seen, without waiting for the resend.

Posts are audited in ``notify_audit`` (channel ``alertmanager``): an alert's first send, its
resolve, and the first failure of a run of failures (not every re-send: the audit log would
grow by one row per alert per minute).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import httpx2

from hpcscope.ingest.tls import default_tls_context
from hpcscope.model.access import JobScope
from hpcscope.model.alerts import VECTOR_NAMES, Alert, AlertState
from hpcscope.model.timeutil import iso_z, utcnow
from hpcscope.service.notify.delivery import DeliveryError
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store.notify import AuditEntry, record_audit

log = logging.getLogger(__name__)

#: Alerts read per cycle at most (the most severe and recent first).
MAX_ALERTS = 5000


def alert_labels(alert: Alert) -> dict[str, str]:
    """The label set that identifies ``alert`` in Alertmanager (empty values left out)."""
    labels = {
        "alertname": "HpcscopeAlert",
        "rule_id": alert.rule_id,
        "vector": VECTOR_NAMES[alert.vector],
        "severity": alert.severity.name.lower(),
        "node": alert.node or "",
        "job_id": alert.job_id or "",
        "user": alert.user or "",
        "account": alert.account or "",
        "gpu": "" if alert.gpu is None else str(alert.gpu),
        "dedup_key": alert.key,
    }
    return {k: v for k, v in labels.items() if v}


def alert_payload(
    alert: Alert, *, ends_at: datetime, generator_url: str | None = None
) -> dict[str, object]:
    """One element of the ``POST /api/v2/alerts`` body."""
    evidence = alert.evidence[0].summary if alert.evidence else ""
    payload: dict[str, object] = {
        "labels": alert_labels(alert),
        "annotations": {
            "summary": alert.title,
            "description": evidence or alert.title,
            "state": alert.state.value,
            "count": str(alert.count),
            **({"subject": alert.subject} if alert.subject else {}),
        },
        "startsAt": iso_z(alert.first_seen),
        "endsAt": iso_z(ends_at),
    }
    if generator_url:
        payload["generatorURL"] = generator_url
    return payload


class AlertmanagerClient:
    """``POST /api/v2/alerts`` to one Alertmanager."""

    def __init__(self, url: str, *, timeout_seconds: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds

    def post(self, alerts: Sequence[dict[str, object]]) -> None:
        """Send a batch.

        Raises:
            DeliveryError: unreachable, or Alertmanager answered other than 200.
        """
        if not alerts:
            return
        try:
            response = httpx2.post(
                f"{self.url}/api/v2/alerts",
                json=list(alerts),
                timeout=self.timeout_seconds,
                verify=default_tls_context(),
            )
        except httpx2.HTTPError as exc:
            raise DeliveryError(f"Alertmanager {self.url}: {exc}") from None
        if response.status_code != 200:
            raise DeliveryError(
                f"Alertmanager {self.url}: HTTP {response.status_code} {response.text[:200]}"
            )


class AlertmanagerForwarder:
    """Keeps Alertmanager in step with the ``alerts`` table (module docstring)."""

    def __init__(
        self,
        store: Store,
        client: AlertmanagerClient,
        *,
        resend_seconds: float = 60.0,
        public_url: str | None = None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.client = client
        self.resend = timedelta(seconds=resend_seconds)
        self.public_url = public_url.rstrip("/") if public_url else None
        self._now = now
        self._firing: dict[str, Alert] = {}
        """Alerts sent as firing, by key (a resolve is sent for each once)."""
        self._last_batch: datetime | None = None
        self._failing = False
        self._started: datetime | None = None

    def _link(self, alert: Alert) -> str | None:
        if self.public_url is None:
            return None
        return f"{self.public_url}/alerts" + (f"?job={alert.job_id}" if alert.job_id else "")

    def forward_once(self) -> int:
        """One cycle: send new alerts, re-send firing ones when due, send resolves.

        Returns:
            How many alerts were posted (0 on failure; the failure is logged and audited).
        """
        now = self._now()
        if self._started is None:
            self._started = now
        scope = JobScope(all_jobs=True)  # hpcscope's own delivery: every alert
        active = alert_store.alerts(
            self.store, scope, states=[AlertState.OPEN, AlertState.ACKNOWLEDGED], limit=MAX_ALERTS
        )
        due = self._last_batch is None or now - self._last_batch >= self.resend
        fresh = [a for a in active if a.key not in self._firing]
        firing = active if due else fresh
        active_keys = {a.key for a in active}
        # resolved (or gone) since sent; after a restart, those resolved since just before it
        resolved = [a for key, a in self._firing.items() if key not in active_keys]
        if self._last_batch is None:
            recent = alert_store.alerts(self.store, scope, states=[AlertState.RESOLVED])
            horizon = self._started - 4 * self.resend
            resolved += [a for a in recent if a.state_at is not None and a.state_at >= horizon]
        stored = (
            {a.key: a for a in alert_store.alerts(self.store, scope, states=[AlertState.RESOLVED])}
            if resolved
            else {}
        )
        body = [
            alert_payload(a, ends_at=now + 4 * self.resend, generator_url=self._link(a))
            for a in firing
        ]
        ended: list[Alert] = []
        for alert in resolved:
            done = stored.get(alert.key, alert)
            ends = done.state_at if done.state_at is not None else now
            ended.append(done)
            body.append(alert_payload(done, ends_at=min(ends, now), generator_url=self._link(done)))
        if not body:
            return 0
        try:
            self.client.post(body)
        except DeliveryError as exc:
            if not self._failing:
                log.warning("%s", exc)
                self._audit([(a, "failed", str(exc)) for a in [*firing, *ended][:1]])
            self._failing = True
            return 0
        self._failing = False
        if due:
            self._last_batch = now
        self._audit(
            [(a, "sent", "firing: first send") for a in fresh]
            + [(a, "sent", "resolved: endsAt sent") for a in ended]
        )
        for alert in firing:
            self._firing[alert.key] = alert
        for alert in ended:
            self._firing.pop(alert.key, None)
        return len(body)

    def _audit(self, rows: list[tuple[Alert, str, str]]) -> None:
        now = self._now()
        entries = [
            AuditEntry(
                at=now,
                kind="notification",
                rule_id=alert.rule_id,
                job_id=alert.job_id,
                user=alert.user,
                account=alert.account,
                channel="alertmanager",
                recipient=self.client.url,
                outcome=outcome,
                detail=f"{detail} (alert {alert.key}, {alert.severity.name}: {alert.title})",
            )
            for alert, outcome, detail in rows
        ]
        if entries:
            record_audit(self.store, entries).result()
