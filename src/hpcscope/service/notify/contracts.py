"""The notification documents the API and the CLI emit (``docs/schemas/notify-*.schema.json``).

``GET /api/jobs/{id}/notes`` is a :class:`JobNotesDocument` (``hpcscope job report ID
--json`` adds it to the job report); ``GET``/``PUT /api/notify/preferences`` a
:class:`PreferencesDocument`; ``GET /api/notify/audit`` (admins) an :class:`AuditLog`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcscope.analysis.notify.facts import JobFacts
from hpcscope.analysis.notify.notes import Note
from hpcscope.model.timeutil import iso_z
from hpcscope.service.contract import Contract, Number, UtcText
from hpcscope.store.notify import AuditEntry, Preferences


class NoteDocument(Contract):
    """One note: what is wrong (measured, with units), the threshold, what to do."""

    rule_id: str
    level: str
    problem: str
    threshold: str
    advice: str
    gpus: list[str]
    figures: dict[str, Number]


class NoteGpuRow(Contract):
    """One GPU of the job as the notes saw it (ratios 0-1, bytes)."""

    node: str
    gpu: int
    verdict: str
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    max_fb_used_bytes: float | None
    fb_total_bytes: float | None
    memory_used_ratio: float | None
    max_temperature_celsius: float | None
    xid: int | None


class JobNotesDocument(Contract):
    """A job's notes, most serious first, with the per-GPU figures they come from."""

    job_id: str
    gpus: list[NoteGpuRow]
    notes: list[NoteDocument]

    @classmethod
    def of(cls, facts: JobFacts, notes: Sequence[Note]) -> JobNotesDocument:
        return cls(
            job_id=facts.job_id,
            gpus=[
                NoteGpuRow(
                    node=g.node,
                    gpu=g.gpu,
                    verdict=g.verdict,
                    reported_util_ratio=g.reported_util_ratio,
                    sm_active_ratio=g.sm_active_ratio,
                    max_fb_used_bytes=g.max_fb_used_bytes,
                    fb_total_bytes=g.fb_total_bytes,
                    memory_used_ratio=g.memory_used_ratio,
                    max_temperature_celsius=g.max_temperature_celsius,
                    xid=g.xid,
                )
                for g in facts.gpus
            ],
            notes=[NoteDocument.model_validate(n.to_dict()) for n in notes],
        )


class PreferencesDocument(Contract):
    """One user's notification choices: channels on or off, rules muted."""

    user: str
    email_enabled: bool
    webhook_enabled: bool
    muted_rules: list[str]
    rules: list[str]
    """Every notification rule id a user may mute."""
    updated_at: UtcText | None
    updated_by: str | None

    @classmethod
    def of(cls, prefs: Preferences, rules: Sequence[str]) -> PreferencesDocument:
        return cls(
            user=prefs.user,
            email_enabled=prefs.email_enabled,
            webhook_enabled=prefs.webhook_enabled,
            muted_rules=sorted(prefs.muted_rules),
            rules=list(rules),
            updated_at=None if prefs.updated_at is None else iso_z(prefs.updated_at),
            updated_by=prefs.updated_by,
        )


class PreferencesUpdate(Contract):
    """The body of ``PUT /api/notify/preferences`` (a field left out keeps its value)."""

    email_enabled: bool | None = None
    webhook_enabled: bool | None = None
    muted_rules: list[str] | None = None


class AuditEntryDocument(Contract):
    """One audited notification or action."""

    audit_id: str
    at: UtcText
    kind: str
    rule_id: str
    job_id: str | None
    user: str | None
    account: str | None
    channel: str
    recipient: str | None
    outcome: str
    detail: str

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditEntryDocument:
        data = entry.to_dict()
        data["at"] = iso_z(entry.at)
        return cls.model_validate(data)


class AuditLog(Contract):
    """Audited notifications and actions, newest first."""

    entries: list[AuditEntryDocument]

    @classmethod
    def of(cls, entries: Sequence[AuditEntry]) -> AuditLog:
        return cls(entries=[AuditEntryDocument.of(e) for e in entries])
