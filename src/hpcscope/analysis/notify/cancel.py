"""Warn-then-cancel: the state machine of the idle-allocation action, as a pure function.

For a job a ``cancel: true`` rule finds idle (:class:`~hpcscope.analysis.notify.rules.Finding`
with ``cancel``), the service asks :func:`cancel_step` what to do, passing the job's stored
:class:`CancelRecord` (None the first time) and whether the rule still holds now:

    (no record) --idle--> WARN: the owner is warned, the record is WARNED at ``now``
    WARNED --still idle, grace not over--> WAIT
    WARNED --still idle once ``grace_seconds`` have passed--> CANCEL (``scancel``; CANCELLED)
    WARNED --active again, or the job ended--> CLEAR (the record is CLEARED; a later idle
        spell starts over with a new warning)
    CANCELLED / CLEARED --> NOTHING (a cleared job that goes idle again is warned anew)

The re-check is the rule evaluated again on fresh minutes: a job that started computing
during the warning period is never cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class CancelPhase(StrEnum):
    """Where a job is in warn-then-cancel."""

    WARNED = "warned"
    CANCELLED = "cancelled"
    CLEARED = "cleared"


class CancelAction(StrEnum):
    """What the service does next."""

    NOTHING = "nothing"
    WARN = "warn"
    WAIT = "wait"
    CANCEL = "cancel"
    CLEAR = "clear"


@dataclass(frozen=True, slots=True)
class CancelRecord:
    """A job's warn-then-cancel state, as stored.

    Attributes:
        job_id: the job.
        rule_id: the rule that warned.
        phase: warned, cancelled or cleared.
        warned_at: when the owner was warned (naive UTC).
        decided_at: when it was cancelled or cleared, None while warned.
    """

    job_id: str
    rule_id: str
    phase: CancelPhase
    warned_at: datetime
    decided_at: datetime | None = None

    def cancel_due_at(self, grace_seconds: float) -> datetime:
        return self.warned_at + timedelta(seconds=grace_seconds)


def cancel_step(
    record: CancelRecord | None,
    *,
    idle_now: bool,
    running: bool,
    now: datetime,
    grace_seconds: float,
) -> CancelAction:
    """The next action for one job (transitions in the module docstring).

    Args:
        record: the job's stored state, None when it was never warned.
        idle_now: the ``cancel`` rule holds for the job at ``now`` (the re-check).
        running: the job is still running (a job that ended needs no cancel).
        now: the evaluation time (naive UTC).
        grace_seconds: how long after the warning the job may still start working.
    """
    if record is None or record.phase is CancelPhase.CLEARED:
        return CancelAction.WARN if idle_now and running else CancelAction.NOTHING
    if record.phase is CancelPhase.CANCELLED:
        return CancelAction.NOTHING
    if not idle_now or not running:
        return CancelAction.CLEAR
    if now >= record.cancel_due_at(grace_seconds):
        return CancelAction.CANCEL
    return CancelAction.WAIT
