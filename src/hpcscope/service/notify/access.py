"""What the web app and the CLI ask of notifications, with the principal's rights applied.

* job notes: the job report's visibility rule (own jobs; a team lead's accounts; admins all);
  a job one may not see is indistinguishable from one that does not exist (None);
* preferences: every user reads and edits **only their own** (nobody, admins included,
  changes another person's choices: the route takes no user name);
* the audit log: admins only (:class:`AuditDenied` otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.analysis.notify.notes import job_notes
from hpcscope.model.access import Principal
from hpcscope.model.errors import AccessError, InputError
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.notify.config import NotifyConfig, load_notify_config
from hpcscope.service.notify.contracts import (
    AuditLog,
    JobNotesDocument,
    PreferencesDocument,
    PreferencesUpdate,
)
from hpcscope.service.notify.facts import facts_of
from hpcscope.store import notify as notify_store
from hpcscope.store.notify import Preferences


class AuditDenied(AccessError):
    """The audit log of notifications and actions is for admins only (403)."""


class PreferencesError(InputError, ValueError):
    """A preferences update naming a rule that does not exist (400)."""


@lru_cache(maxsize=8)
def _config(path: Path | None) -> NotifyConfig:
    return load_notify_config(path)


def notify_config(service: Service) -> NotifyConfig:
    """The site's rules file (read once per path)."""
    return _config(service.settings.notify_rules_path)


def notes_for_job(
    service: Service, principal: Principal, job_id: str, *, now: datetime | None = None
) -> JobNotesDocument | None:
    """The notes of one job ``principal`` may see; None when absent or not visible."""
    report = service.job_report(principal, job_id, now=now or utcnow())
    return None if report is None else notes_of_report(service, report)


def notes_of_report(service: Service, report: JobReport) -> JobNotesDocument:
    """The notes of a report the caller already read (and so may see)."""
    return notes_of_reports(service, [report])[0]


def notes_of_reports(service: Service, found: Sequence[JobReport]) -> list[JobNotesDocument]:
    """:func:`notes_of_report` of several reports, in their order (one read of their GPUs)."""
    thresholds = notify_config(service).notes
    return [
        JobNotesDocument.of(facts, job_notes(facts, thresholds=thresholds))
        for facts in facts_of(service, found)
    ]


def my_preferences(service: Service, principal: Principal) -> PreferencesDocument:
    """``principal``'s own notification preferences."""
    rules = [r.rule_id for r in notify_config(service).rules]
    return PreferencesDocument.of(notify_store.preferences(service.store, principal.name), rules)


def update_my_preferences(
    service: Service,
    principal: Principal,
    update: PreferencesUpdate,
    *,
    now: datetime | None = None,
) -> PreferencesDocument:
    """Change ``principal``'s own preferences (fields left out keep their value).

    Raises:
        PreferencesError: a muted rule id that is not a notification rule.
    """
    rules = [r.rule_id for r in notify_config(service).rules]
    current = notify_store.preferences(service.store, principal.name)
    muted = current.muted_rules if update.muted_rules is None else tuple(update.muted_rules)
    unknown = sorted(set(muted) - set(rules))
    if unknown:
        raise PreferencesError(f"unknown rule(s) {', '.join(unknown)} (one of {', '.join(rules)})")
    changed = Preferences(
        user=principal.name,
        email_enabled=current.email_enabled
        if update.email_enabled is None
        else update.email_enabled,
        webhook_enabled=current.webhook_enabled
        if update.webhook_enabled is None
        else update.webhook_enabled,
        muted_rules=tuple(sorted(set(muted))),
    )
    notify_store.set_preferences(
        service.store, changed, by=principal.name, at=now or utcnow()
    ).result()
    return my_preferences(service, principal)


def audit_for(
    service: Service,
    principal: Principal,
    *,
    job_id: str | None = None,
    kind: str | None = None,
    limit: int = 500,
) -> AuditLog:
    """The audit log, newest first.

    Raises:
        AuditDenied: ``principal`` is not an admin.
    """
    if not principal.is_admin:
        raise AuditDenied("the notification audit log is for admins")
    return AuditLog.of(notify_store.audit_log(service.store, job_id=job_id, kind=kind, limit=limit))
