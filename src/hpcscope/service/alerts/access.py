"""Alerts for a principal: reads scoped to their jobs, state changes on their jobs only.

A researcher sees the alerts of their own jobs, a team lead those of the accounts they
coordinate, an admin all (G3, applied in SQL by :func:`hpcscope.store.alerts.alerts`).
Acknowledging or resolving follows the same rule (G9: only on one's own jobs).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.model.access import Principal
from hpcscope.model.alerts import Alert, AlertState, Severity
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store


def alerts_for(
    store: Store,
    principal: Principal,
    *,
    job_id: str | None = None,
    states: list[AlertState] | None = None,
    min_severity: Severity | None = None,
) -> list[Alert]:
    """The alerts ``principal`` may see, most severe first."""
    return alert_store.alerts(
        store, principal.job_scope(), job_id=job_id, states=states, min_severity=min_severity
    )


def set_state(
    store: Store, principal: Principal, key: str, state: AlertState, *, now: datetime
) -> Alert | None:
    """Change one visible alert's state; None when ``principal`` cannot see it."""
    visible = alert_store.alerts(store, principal.job_scope(), key=key, limit=1)
    if not visible:
        return None
    alert_store.set_alert_state(store, key, state, by=principal.name, at=now).result()
    changed = alert_store.alerts(store, principal.job_scope(), key=key, limit=1)
    return changed[0] if changed else None
