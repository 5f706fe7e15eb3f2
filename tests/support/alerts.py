"""Alerts a test opens: one more open alert on a node, written and waited for."""

from __future__ import annotations

from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.store import alerts as alert_store
from hpcscope.store.duck import Store


def open_escape_alert(store: Store, *, node: str, subject: str) -> Alert:
    """A HIGH container-escape alert (CE-3, nsenter) on ``node``, seen now, upserted: a new
    ``subject`` opens a new alert, the same one repeats it."""
    at = utcnow()
    alert = Alert(
        rule_id="CE-3",
        vector=Vector.CONTAINER_ESCAPE,
        severity=Severity.HIGH,
        title="nsenter",
        first_seen=at,
        last_seen=at,
        node=node,
        subject=subject,
    )
    alert_store.upsert_alerts(store, [alert]).result()
    return alert
