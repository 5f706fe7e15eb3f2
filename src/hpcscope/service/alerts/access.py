"""Alerts for a principal: reads scoped to their jobs, state changes on their jobs only.

A researcher sees the alerts of their own jobs, a team lead those of the accounts they
coordinate, an admin all (G3, applied in SQL by :func:`hpcscope.store.alerts.alerts`).
Acknowledging or resolving is narrower (G9: only on one's own jobs): the job's user or an
admin; a team lead sees the alerts of the accounts they coordinate but acknowledges only
those of their own jobs (:class:`AlertStateDenied`).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.model.access import Principal
from hpcscope.model.alerts import Alert, AlertState, Severity, Vector
from hpcscope.model.errors import AccessError
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store


class AlertStateDenied(AccessError, PermissionError):
    """The alert is visible, but its job is not the principal's own (G9)."""


def alerts_for(
    store: Store,
    principal: Principal,
    *,
    job_id: str | None = None,
    states: list[AlertState] | None = None,
    min_severity: Severity | None = None,
    vector: Vector | None = None,
) -> list[Alert]:
    """The alerts ``principal`` may see, most severe first."""
    return alert_store.alerts(
        store,
        principal.job_scope(),
        job_id=job_id,
        states=states,
        min_severity=min_severity,
        vector=vector,
    )


def may_change_state(principal: Principal, alert: Alert) -> bool:
    """G9: admins on every alert, others on the alerts of their own jobs."""
    return principal.is_admin or (alert.job_id is not None and alert.user == principal.name)


def set_state(
    store: Store, principal: Principal, key: str, state: AlertState, *, now: datetime
) -> Alert | None:
    """Change one visible alert's state; None when ``principal`` cannot see it.

    Raises:
        AlertStateDenied: visible, but not on the principal's own job (G9).
    """
    visible = alert_store.alerts(store, principal.job_scope(), key=key, limit=1)
    if not visible:
        return None
    if not may_change_state(principal, visible[0]):
        raise AlertStateDenied("this alert is not on one of your jobs (G9: admins act on others)")
    alert_store.set_alert_state(store, key, state, by=principal.name, at=now).result()
    changed = alert_store.alerts(store, principal.job_scope(), key=key, limit=1)
    return changed[0] if changed else None
