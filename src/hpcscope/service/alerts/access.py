"""Alerts for a principal: reads scoped to their jobs, state changes on their jobs only.

A researcher sees the alerts of their own jobs, a team lead those of the accounts they
coordinate, an admin, the security team and an auditor all
(:meth:`~hpcscope.model.access.Principal.alert_scope`, applied in SQL by
:func:`hpcscope.store.alerts.alerts`). An auditor reads them with the file paths of model
weights redacted (:class:`~hpcscope.model.access.WeightPaths`). Acknowledging or resolving is
narrower (G9: only on one's own jobs): the job's user, an admin or the security team; a team
lead sees the alerts of the accounts they coordinate but acknowledges only those of their own
jobs (:class:`AlertStateDenied`); an auditor and a read-only token change none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hpcscope.model.access import Principal, Role, WeightPaths
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
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
    weight_paths: WeightPaths | None = None,
    as_read: bool = False,
) -> list[Alert]:
    """The alerts ``principal`` may see, most severe first.

    Args:
        weight_paths: what counts as weights, for an auditor's redaction (the topology's
            checkpoint roots and formats); None: the default extensions only.
        as_read: whose job each alert is on as the collector read it after its last cycle
            (:func:`owners_read`), never a query: a job's first alert since is nobody's.
    """
    found = alert_store.alerts(
        store,
        principal.alert_scope(),
        job_id=job_id,
        states=states,
        min_severity=min_severity,
        vector=vector,
        as_read=as_read,
    )
    if principal.redacts_weight_paths:
        paths = weight_paths or WeightPaths()
        return [redact_alert(alert, paths) for alert in found]
    return found


def alerts_in_memory(store: Store) -> bool:
    """Whether :func:`alerts_for` reads memory only now (the store's alert index, the jobs'
    owners current): a kept list of alerts may then be computed where a read must not block
    (the read lane's event loop)."""
    return alert_store.alerts_in_memory(store)


def owners_read(store: Store, *, published: bool) -> int | None:
    """Once a collector publishes its cycles (``published``), the version of the jobs' owners
    as it read them after its last one, once read: the alerts and their counts read
    ``as_read`` with them come from memory, and what is kept of them is versioned by it.
    None: read them as before (not published, or not read yet: ``as_read`` would query)."""
    return alert_store.owners_read_version(store) if published else None


@dataclass(frozen=True, slots=True)
class RedactedAlert(Alert):
    """An alert as an auditor reads it: texts redacted, the stored alert's key kept (the key
    is a digest of the subject, so it names no path)."""

    stored_key: str = ""

    @property
    def key(self) -> str:
        return self.stored_key


def redact_alert(alert: Alert, paths: WeightPaths) -> Alert:
    """``alert`` with the file paths of weights removed from every text it carries."""

    def text(value: str | None) -> str | None:
        return None if value is None else paths.redact(value)

    evidence = tuple(
        Evidence(paths.redact(e.summary), paths.redact(e.source), text(e.position), text(e.link))
        for e in alert.evidence
    )
    fields = {name: getattr(alert, name) for name in Alert.__dataclass_fields__}
    fields.update(title=paths.redact(alert.title), subject=text(alert.subject), evidence=evidence)
    return RedactedAlert(**fields, stored_key=alert.key)


def may_change_state(principal: Principal, alert: Alert) -> bool:
    """G9: admins and the security team on every alert, others on the alerts of their own
    jobs; an auditor or a read-only token on none."""
    if not principal.may_change:
        return False
    if principal.is_admin or principal.role is Role.SECURITY:
        return True
    return alert.job_id is not None and alert.user == principal.name


def set_state(
    store: Store, principal: Principal, key: str, state: AlertState, *, now: datetime
) -> Alert | None:
    """Change one visible alert's state; None when ``principal`` cannot see it.

    Raises:
        AlertStateDenied: visible, but not on the principal's own job (G9).
    """
    visible = alert_store.alerts(store, principal.alert_scope(), key=key, limit=1)
    if not visible:
        return None
    if not may_change_state(principal, visible[0]):
        raise AlertStateDenied("this alert is not on one of your jobs (G9: admins act on others)")
    alert_store.set_alert_state(store, key, state, by=principal.name, at=now).result()
    changed = alert_store.alerts(store, principal.alert_scope(), key=key, limit=1)
    return changed[0] if changed else None
