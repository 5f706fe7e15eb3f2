"""The notifier: the collector's after-cycle hook that evaluates the notification rules,
delivers what holds, runs warn-then-cancel and keeps Alertmanager in step.

Each cycle (``Notifier.run_once``):

1. reads the running jobs' recent 1-minute rollups and records (and those of the jobs in the
   warned phase), and the reports of the jobs that ended in the last day, and builds their
   facts (:mod:`hpcscope.service.notify.facts`): running jobs are judged without a report over
   their raw samples; only the jobs a rule finds get one, for the notes in the message;
2. evaluates the rules (:func:`hpcscope.analysis.notify.rules.evaluate_rules`);
3. for each finding and channel: withholds it when the owner opted out (``opted_out``), when
   the same rule already reached them about the same job within ``notify_repeat_hours``
   (deduplication: nothing audited), or when they got ``notify_max_per_user_per_hour`` on that
   channel in the last hour (``rate_limited``); otherwise delivers it (``sent`` or
   ``failed``). Each outcome but the silent duplicate is a ``notify_audit`` row;
4. with ``notify_cancel_enabled``, steps warn-then-cancel for every job a ``cancel: true`` rule
   finds idle and every job already warned (:func:`hpcscope.analysis.notify.cancel.cancel_step`):
   the warning goes out on every channel regardless of opt-outs (nobody's job is cancelled
   unwarned), the cancel runs ``scancel`` through the :class:`SchedulerCommands` seam, and
   each step is an ``action`` row in the audit log;
5. forwards the alerts table to Alertmanager (:mod:`hpcscope.service.notify.alertmanager`).

A failure is logged and never stops collection (the next cycle tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.analysis.notify.cancel import CancelAction, CancelPhase, CancelRecord, cancel_step
from hpcscope.analysis.notify.facts import JobFacts
from hpcscope.analysis.notify.notes import job_notes
from hpcscope.analysis.notify.rules import Finding, RuleKind, evaluate_rules
from hpcscope.model.timeutil import iso_z, utcnow
from hpcscope.service.core import Service
from hpcscope.service.notify.alertmanager import AlertmanagerForwarder
from hpcscope.service.notify.config import NotifyConfig
from hpcscope.service.notify.delivery import (
    Channel,
    DeliveryError,
    Message,
)
from hpcscope.service.notify.facts import (
    facts_of,
    light_facts,
    minutes_by_job,
    reports_at,
    running_minutes,
)
from hpcscope.service.notify.scheduler import CancelFailed, SchedulerCommands
from hpcscope.store import notify as notify_store
from hpcscope.store.notify import AuditEntry

log = logging.getLogger(__name__)

#: Outcomes that count as "already told" for deduplication.
_TOLD = ("sent", "opted_out", "rate_limited")


@dataclass(frozen=True, slots=True)
class NotifyPolicy:
    """The delivery and cancel settings of the site (from ``Settings``)."""

    repeat_hours: float = 24.0
    max_per_user_per_hour: int = 20
    cancel_enabled: bool = False
    cancel_grace_seconds: float = 1800.0
    public_url: str | None = None
    interval_seconds: float = 60.0
    """The hook runs at most this often (the rules look at whole minutes)."""


@dataclass(frozen=True, slots=True)
class NotifyCycle:
    """What one cycle did (counts of audit outcomes)."""

    findings: int = 0
    sent: int = 0
    failed: int = 0
    withheld: int = 0
    warned: int = 0
    cancelled: int = 0
    cleared: int = 0
    alertmanager_posted: int = 0


def _fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


class Notifier:
    """Rules -> deliveries, warn-then-cancel, Alertmanager (module docstring)."""

    def __init__(
        self,
        service: Service,
        config: NotifyConfig,
        *,
        channels: Sequence[Channel] = (),
        scheduler: SchedulerCommands | None = None,
        forwarder: AlertmanagerForwarder | None = None,
        policy: NotifyPolicy = NotifyPolicy(),
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.service = service
        self.config = config
        self.channels = tuple(channels)
        self.scheduler = scheduler
        self.forwarder = forwarder
        self.policy = policy
        self._now = now
        self.last: NotifyCycle | None = None
        self._last_run: datetime | None = None

    # ------------------------------------------------------------------ the hook

    def after_cycle(self) -> NotifyCycle | None:
        """The collector's hook: one cycle when ``interval_seconds`` have passed since the
        last (the collector cycles every scrape interval); a failure is logged, never raised."""
        now = self._now()
        if self._last_run is not None and (now - self._last_run).total_seconds() < (
            self.policy.interval_seconds
        ):
            return None
        self._last_run = now
        try:
            self.last = self.run_once()
        except Exception:  # notifications must never stop collection
            log.exception("notifications cycle failed")
            return None
        return self.last

    def run_once(self) -> NotifyCycle:
        now = self._now()
        store = self.service.store
        minute_rules = [r for r in self.config.rules if r.kind is not RuleKind.FAILED_WITH_XID]
        window = max((r.for_minutes for r in minute_rules), default=0) + 2
        running = notify_store.running_job_ids(store)
        minutes = minutes_by_job(
            running_minutes(self.service, running, since=now - timedelta(minutes=window), until=now)
        )
        warned = notify_store.warned_job_ids(store) if self._cancelling else []
        ended = notify_store.recently_ended_job_ids(store, since=now - timedelta(days=1))
        # running jobs are judged on their minutes and their record alone (cheap: no report
        # over their raw samples every minute); ended jobs (Xid) on their reports
        light = light_facts(
            notify_store.job_records(store, sorted(set(running) | set(warned))),
            minutes,
            now=now,
        )
        heavy = facts_of(self.service, reports_at(self.service, ended, now=now))
        findings = evaluate_rules([*light, *heavy], self.config.rules, now=now)
        # the messages carry the job's notes: full facts for the jobs a rule found only
        told = sorted({f.job_id for f in findings} - {f.job_id for f in heavy})
        by_job = {f.job_id: f for f in light}
        by_job |= {f.job_id: f for f in heavy}
        by_job |= {
            f.job_id: f for f in facts_of(self.service, reports_at(self.service, told, now=now))
        }
        counts = {"sent": 0, "failed": 0, "withheld": 0}
        cancel_findings: dict[str, Finding] = {}
        for finding in findings:
            if finding.cancel and self._cancelling:
                cancel_findings[finding.job_id] = finding
                continue  # the warning is the notification
            for outcome in self._notify(finding, by_job.get(finding.job_id), now=now):
                counts["withheld" if outcome in ("opted_out", "rate_limited") else outcome] += 1
        steps = {"warned": 0, "cancelled": 0, "cleared": 0}
        if self._cancelling:
            for job_id in sorted(set(cancel_findings) | set(warned)):
                done = self._step_cancel(
                    job_id, cancel_findings.get(job_id), by_job.get(job_id), now=now
                )
                if done in steps:
                    steps[done] += 1
        posted = self.forwarder.forward_once() if self.forwarder is not None else 0
        return NotifyCycle(
            findings=len(findings),
            sent=counts["sent"],
            failed=counts["failed"],
            withheld=counts["withheld"],
            warned=steps["warned"],
            cancelled=steps["cancelled"],
            cleared=steps["cleared"],
            alertmanager_posted=posted,
        )

    @property
    def _cancelling(self) -> bool:
        return self.policy.cancel_enabled and self.scheduler is not None

    # ------------------------------------------------------------------ notifications

    def _link(self, job_id: str | None) -> str:
        if not self.policy.public_url or not job_id:
            return ""
        return f"\n\nThe job's report: {self.policy.public_url.rstrip('/')}/jobs/{job_id}"

    def _opt_out_line(self) -> str:
        where = (
            f"{self.policy.public_url.rstrip('/')}/notify"
            if self.policy.public_url
            else "the Notifications page of hpcscope"
        )
        return f"\n\nYou get this because you own the job. Choose what you get at {where}."

    def message_for(self, finding: Finding, facts: JobFacts | None) -> Message:
        """The message of one finding: what holds, then the job's notes (threshold, advice)."""
        rule = self.config.rule(finding.rule_id)
        title = rule.title if rule is not None else finding.rule_id
        notes = job_notes(facts, thresholds=self.config.notes) if facts is not None else []
        lines = [finding.summary]
        for note in notes:
            lines.append(
                f"\n* {note.problem}\n  Threshold: {note.threshold}.\n  What to do: {note.advice}"
            )
        return Message(
            rule_id=finding.rule_id,
            job_id=finding.job_id,
            user=finding.user,
            account=finding.account,
            subject=f"[hpcscope] {title}: job {finding.job_id}",
            body="\n".join(lines) + self._link(finding.job_id) + self._opt_out_line(),
            fields={
                "kind": finding.kind.value,
                "at": iso_z(finding.at),
                "figures": dict(finding.figures),
                "notes": [n.rule_id for n in notes],
            },
        )

    def _notify(self, finding: Finding, facts: JobFacts | None, *, now: datetime) -> list[str]:
        message = self.message_for(finding, facts)
        prefs = notify_store.preferences(self.service.store, finding.user or "")
        outcomes = []
        for channel in self.channels:
            recipient = channel.recipient(message)
            if recipient is None:
                continue
            # an ended job's finding (a failure) is told once; a running job's once per repeat
            once = finding.kind is RuleKind.FAILED_WITH_XID
            if self._already_told(finding.rule_id, finding.job_id, channel.name, now, once=once):
                continue
            if not prefs.allows(channel=channel.name, rule_id=finding.rule_id):
                outcome, detail = "opted_out", "the owner opted out of this rule or channel"
            elif self._over_rate(finding.user, channel.name, now):
                outcome, detail = (
                    "rate_limited",
                    f"{self.policy.max_per_user_per_hour} already sent in the last hour",
                )
            else:
                outcome, detail = self._deliver(channel, message)
            self._audit("notification", message, channel.name, recipient, outcome, detail, now)
            outcomes.append(outcome)
        return outcomes

    def _already_told(
        self, rule_id: str, job_id: str | None, channel: str, now: datetime, *, once: bool
    ) -> bool:
        since = datetime.min if once else now - timedelta(hours=self.policy.repeat_hours)
        return any(
            at >= since and outcome in _TOLD
            for at, outcome in notify_store.last_outcomes(
                self.service.store, rule_id=rule_id, job_id=job_id, channel=channel
            )
        )

    def _over_rate(self, user: str | None, channel: str, now: datetime) -> bool:
        if user is None:
            return False
        sent = notify_store.sent_since(
            self.service.store, user=user, channel=channel, since=now - timedelta(hours=1)
        )
        return sent >= self.policy.max_per_user_per_hour

    @staticmethod
    def _deliver(channel: Channel, message: Message) -> tuple[str, str]:
        try:
            channel.deliver(message)
        except DeliveryError as exc:
            log.warning("notification %s of job %s: %s", message.rule_id, message.job_id, exc)
            return "failed", str(exc)
        return "sent", message.subject

    def _audit(
        self,
        kind: str,
        message: Message,
        channel: str,
        recipient: str | None,
        outcome: str,
        detail: str,
        now: datetime,
    ) -> None:
        notify_store.record_audit(
            self.service.store,
            [
                AuditEntry(
                    at=now,
                    kind=kind,
                    rule_id=message.rule_id,
                    job_id=message.job_id,
                    user=message.user,
                    account=message.account,
                    channel=channel,
                    recipient=recipient,
                    outcome=outcome,
                    detail=detail,
                )
            ],
        ).result()

    def _broadcast(self, message: Message, now: datetime) -> int:
        """Send ``message`` on every channel, ignoring opt-outs and the rate limit (the
        warning before a cancel and the cancel itself); returns how many were delivered."""
        delivered = 0
        for channel in self.channels:
            recipient = channel.recipient(message)
            if recipient is None:
                continue
            outcome, detail = self._deliver(channel, message)
            delivered += outcome == "sent"
            self._audit("notification", message, channel.name, recipient, outcome, detail, now)
        return delivered

    # ------------------------------------------------------------------ warn-then-cancel

    def _step_cancel(
        self, job_id: str, finding: Finding | None, facts: JobFacts | None, *, now: datetime
    ) -> str:
        store = self.service.store
        row = notify_store.cancel_records(store, [job_id]).get(job_id)
        record = (
            CancelRecord(
                job_id=job_id,
                rule_id=str(row["rule_id"]),
                phase=CancelPhase(str(row["phase"])),
                warned_at=row["warned_at"],  # type: ignore[arg-type]
                decided_at=row["decided_at"],  # type: ignore[arg-type]
            )
            if row is not None
            else None
        )
        running = facts is not None and facts.state == "RUNNING"
        grace = self.policy.cancel_grace_seconds
        action = cancel_step(
            record, idle_now=finding is not None, running=running, now=now, grace_seconds=grace
        )
        user = facts.user if facts is not None else None
        account = facts.account if facts is not None else None
        rule_id = finding.rule_id if finding is not None else (record.rule_id if record else "")
        if action is CancelAction.WARN and finding is not None:
            due = now + timedelta(seconds=grace)
            warning = self.message_for(finding, facts)
            warning = Message(
                rule_id=finding.rule_id,
                job_id=job_id,
                user=user,
                account=account,
                subject=f"[hpcscope] Job {job_id} will be cancelled at {iso_z(due)} unless "
                "its GPUs start working",
                body=f"{warning.body.split(chr(10) + chr(10) + 'You get this')[0]}\n\n"
                f"Because its GPUs are idle, job {job_id} will be cancelled in "
                f"{_fmt_minutes(grace)} (at {iso_z(due)}) if they are still idle then. "
                "Start using the GPUs, or end the job yourself (scancel) to free them."
                + self._opt_out_line(),
                fields={**warning.fields, "cancel_at": iso_z(due)},
            )
            delivered = self._broadcast(warning, now)
            notify_store.put_cancel_record(
                store,
                job_id=job_id,
                rule_id=rule_id,
                phase="warned",
                warned_at=now,
                decided_at=None,
            ).result()
            self._action(
                job_id, rule_id, user, account, "warned",
                f"owner warned on {delivered} channel(s); cancel due at {iso_z(due)}", now,
            )  # fmt: skip
            return "warned"
        if action is CancelAction.CANCEL and record is not None and self.scheduler is not None:
            reason = (
                f"idle for the {_fmt_minutes(grace)} after the warning at {iso_z(record.warned_at)}"
            )
            try:
                said = self.scheduler.cancel(job_id, reason=reason)
            except CancelFailed as exc:
                self._action(job_id, rule_id, user, account, "cancel_failed", str(exc), now)
                return "cancel_failed"
            notify_store.put_cancel_record(
                store, job_id=job_id, rule_id=rule_id, phase="cancelled",
                warned_at=record.warned_at, decided_at=now,
            ).result()  # fmt: skip
            self._action(job_id, rule_id, user, account, "cancelled", said, now)
            self._broadcast(
                Message(
                    rule_id=rule_id,
                    job_id=job_id,
                    user=user,
                    account=account,
                    subject=f"[hpcscope] Job {job_id} was cancelled: its GPUs stayed idle",
                    body=f"Job {job_id} was cancelled at {iso_z(now)}: its GPUs were still idle "
                    f"{_fmt_minutes(grace)} after the warning of {iso_z(record.warned_at)}."
                    + self._link(job_id),
                ),
                now,
            )
            return "cancelled"
        if action is CancelAction.CLEAR and record is not None:
            notify_store.put_cancel_record(
                store, job_id=job_id, rule_id=record.rule_id, phase="cleared",
                warned_at=record.warned_at, decided_at=now,
            ).result()  # fmt: skip
            why = "the GPUs are working again" if running else "the job is no longer running"
            self._action(
                job_id, record.rule_id, user, account, "cleared", f"not cancelled: {why}", now
            )
            return "cleared"
        return action.value

    def _action(
        self,
        job_id: str,
        rule_id: str,
        user: str | None,
        account: str | None,
        outcome: str,
        detail: str,
        now: datetime,
    ) -> None:
        notify_store.record_audit(
            self.service.store,
            [
                AuditEntry(
                    at=now,
                    kind="action",
                    rule_id=rule_id,
                    job_id=job_id,
                    user=user,
                    account=account,
                    channel="scancel",
                    recipient=None,
                    outcome=outcome,
                    detail=detail,
                )
            ],
        ).result()
