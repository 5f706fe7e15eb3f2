"""Notification rules: which jobs to tell their owners about, from their recent minutes.

A :class:`NotifyRule` is data (``deploy/notify/notifications.yaml``); :func:`evaluate_rules`
applies the rules to the jobs' facts at ``now`` and returns one :class:`Finding` per (rule,
job) that holds. Kinds:

* ``low_real_efficiency``: every minute of the last ``for_minutes`` the job's mean real
  efficiency (SM active) was under ``below_ratio``.
* ``zero_activity``: every minute of the last ``for_minutes`` every GPU of the job was at or
  under ``below_ratio`` both in SM active and in reported utilisation ("0 %": the allocation
  is idle). A rule of this kind may carry ``cancel: true``: the warn-then-cancel action.
* ``idle_gpus``: every minute of the last ``for_minutes`` at least one GPU of the job was at
  or under ``below_ratio`` while another worked (over-requested GPUs).
* ``failed_with_xid``: the job ended ``FAILED`` or ``NODE_FAIL`` and a GPU raised an Xid.

The minute-based kinds apply to running jobs only, and only once the window is covered: at
least ``min_coverage_ratio`` of its minutes have rollups (a collection gap is not idleness).
The current, partial minute is left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from hpcscope.analysis.notify.facts import GpuMinute, JobFacts
from hpcscope.analysis.notify.notes import pct


class RuleKind(StrEnum):
    """What a notification rule tests (module docstring)."""

    LOW_REAL_EFFICIENCY = "low_real_efficiency"
    ZERO_ACTIVITY = "zero_activity"
    IDLE_GPUS = "idle_gpus"
    FAILED_WITH_XID = "failed_with_xid"


#: Job states after which ``failed_with_xid`` applies.
FAILED_STATES = frozenset({"FAILED", "NODE_FAIL"})


@dataclass(frozen=True, slots=True)
class NotifyRule:
    """A notification rule as data.

    Attributes:
        rule_id: stable id (``low-efficiency``), named in opt-outs and the audit log.
        kind: what it tests.
        title: one line for a person (the e-mail subject starts with it).
        below_ratio: the threshold of the minute-based kinds (0-1).
        for_minutes: how long the condition must hold.
        min_coverage_ratio: share of the window's minutes that must have data.
        cancel: warn-then-cancel the job (``zero_activity`` only; the site's
            ``notify_cancel_enabled`` must be on too).
        enabled: a site can switch a rule off without deleting it.
        source / line: where the rule was defined (for messages).
    """

    rule_id: str
    kind: RuleKind
    title: str
    below_ratio: float = 0.0
    for_minutes: int = 30
    min_coverage_ratio: float = 0.8
    cancel: bool = False
    enabled: bool = True
    source: str = "<builtin>"
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that holds for one job at ``at``.

    Attributes:
        rule_id / kind: the rule.
        job_id / user / account: the job and its owner (the notification's recipient).
        at: when it was evaluated (naive UTC).
        summary: one line: what was measured, over how long, against which threshold.
        cancel: the rule asks for warn-then-cancel.
        figures: measured values (ratios 0-1, minutes, counts).
    """

    rule_id: str
    kind: RuleKind
    job_id: str
    user: str | None
    account: str | None
    at: datetime
    summary: str
    cancel: bool = False
    figures: dict[str, float] = field(default_factory=dict)


def _window(job: JobFacts, rule: NotifyRule, now: datetime) -> dict[datetime, list[GpuMinute]]:
    """The job's complete minutes in the rule's window, by minute."""
    current = now.replace(second=0, microsecond=0)
    start = current - timedelta(minutes=rule.for_minutes)
    minutes: dict[datetime, list[GpuMinute]] = defaultdict(list)
    for row in job.minutes:
        if start <= row.minute < current:
            minutes[row.minute].append(row)
    return minutes


def _covered(job: JobFacts, rule: NotifyRule, minutes: dict[datetime, list[GpuMinute]]) -> bool:
    if job.state != "RUNNING" or rule.for_minutes <= 0:
        return False
    if job.elapsed_seconds is not None and job.elapsed_seconds < rule.for_minutes * 60:
        return False
    return len(minutes) >= max(1.0, rule.min_coverage_ratio * rule.for_minutes)


def _is_idle(row: GpuMinute, below: float) -> bool:
    return (row.sm_active_ratio or 0.0) <= below and (row.reported_util_ratio or 0.0) <= below


def _mean_sm(rows: Sequence[GpuMinute]) -> float | None:
    known = [r.sm_active_ratio for r in rows if r.sm_active_ratio is not None]
    return sum(known) / len(known) if known else None


def _finding(
    job: JobFacts, rule: NotifyRule, now: datetime, summary: str, **figures: float
) -> Finding:
    return Finding(
        rule_id=rule.rule_id,
        kind=rule.kind,
        job_id=job.job_id,
        user=job.user,
        account=job.account,
        at=now,
        summary=summary,
        cancel=rule.cancel and rule.kind is RuleKind.ZERO_ACTIVITY,
        figures=dict(figures),
    )


def evaluate_rule(job: JobFacts, rule: NotifyRule, *, now: datetime) -> Finding | None:
    """One rule on one job at ``now``: the finding, or None when the rule does not hold."""
    if not rule.enabled:
        return None
    if rule.kind is RuleKind.FAILED_WITH_XID:
        bad = [g for g in job.gpus if g.xid is not None]
        if job.state not in FAILED_STATES or not bad:
            return None
        where = ", ".join(f"Xid {g.xid} on {g.label}" for g in bad)
        return _finding(
            job,
            rule,
            now,
            f"Job {job.job_id} ended {job.state} after {where}.",
            xid=float(bad[0].xid or 0),
        )
    minutes = _window(job, rule, now)
    if not _covered(job, rule, minutes):
        return None
    span = f"for the last {rule.for_minutes} min"
    if rule.kind is RuleKind.LOW_REAL_EFFICIENCY:
        means = [_mean_sm(rows) for rows in minutes.values()]
        if any(m is None or m >= rule.below_ratio for m in means):
            return None
        worst = max(m for m in means if m is not None)
        return _finding(
            job,
            rule,
            now,
            f"Real efficiency (SM active) of job {job.job_id} stayed under "
            f"{pct(rule.below_ratio)} {span} (at most {pct(worst)} in any minute).",
            sm_active_ratio=worst,
            minutes=float(len(minutes)),
        )
    if rule.kind is RuleKind.ZERO_ACTIVITY:
        if not all(_is_idle(r, rule.below_ratio) for rows in minutes.values() for r in rows):
            return None
        gpus = len({(r.node, r.gpu) for rows in minutes.values() for r in rows})
        return _finding(
            job,
            rule,
            now,
            f"The {gpus} GPU(s) of job {job.job_id} did nothing {span} (SM active and "
            f"utilization at or under {pct(rule.below_ratio)}).",
            gpus_idle=float(gpus),
            minutes=float(len(minutes)),
        )
    # IDLE_GPUS: some GPU idle in every minute while another works
    idle_counts = []
    for rows in minutes.values():
        idle = sum(1 for r in rows if _is_idle(r, rule.below_ratio))
        if idle == 0 or idle == len(rows):
            return None
        idle_counts.append(idle)
    fewest = min(idle_counts)
    allocated = job.gpus_allocated or len({(r.node, r.gpu) for r in job.minutes})
    return _finding(
        job,
        rule,
        now,
        f"At least {fewest} of the {allocated} GPUs of job {job.job_id} were idle {span} "
        f"while the others worked.",
        gpus_idle=float(fewest),
        gpus_allocated=float(allocated),
    )


def evaluate_rules(
    jobs: Sequence[JobFacts], rules: Sequence[NotifyRule], *, now: datetime
) -> list[Finding]:
    """Every (rule, job) finding at ``now``, in job then rule order."""
    return [
        finding
        for job in jobs
        for rule in rules
        if (finding := evaluate_rule(job, rule, now=now)) is not None
    ]
