"""Documents of the phase answer on the job page: ``phases`` in ``GET /api/jobs/{id}`` and
``hpcscope job JOBID --json`` (:class:`JobReportWithPhases`), also ``GET /api/jobs/{id}/phases``
(:class:`JobPhases`). Described in ``docs/capture.md``.

Seconds are means per step over the window's common steps; ranks and nodes are object keys
(ranks as decimal strings).
"""

from __future__ import annotations

from hpcscope.service.alerts.contracts import JobReportWithAlerts
from hpcscope.service.contract import Contract, Number, UtcText
from hpcscope.service.traces.comm_contracts import CommClasses
from hpcscope.service.traces.contracts import EvidenceItem, PhaseSeconds, StepEntry, WhatIf


class RankPlacement(Contract):
    """Where a rank ran: its claim, and whether the platform's allocations confirm it."""

    node: str
    gpu: int | None
    verified: bool


class PhaseStraggler(Contract):
    """The window's slowest rank: where it ran, the phase it lost time in, and the delay."""

    rank: int
    node: str | None
    gpu: int | None
    phase: str
    delay_seconds_per_step: Number
    phase_delay_seconds_per_step: Number | None
    score: Number
    hint: str
    evidence: list[EvidenceItem]


class CaptureWindowDocument(Contract):
    """One capture window of the job, analysed."""

    window: int
    start_utc: UtcText | None
    end_utc: UtcText | None
    ranks: int
    world_size: int
    steps: int
    step_numbers: list[int]
    nodes: list[str]
    #: ``verified``, ``partly verified``, ``unverified`` or ``mismatch`` (docs/capture.md).
    attribution: str
    notes: list[str]
    straggler: PhaseStraggler | None
    what_if: WhatIf
    #: Step seconds saved if the straggler ran like the others (actual - fixed worst).
    what_if_gain_seconds_per_step: Number | None
    phases_per_rank: dict[str, PhaseSeconds]
    step_seconds_per_rank: dict[str, Number]
    phases_per_node: dict[str, PhaseSeconds]
    per_step: list[StepEntry]
    placement: dict[str, RankPlacement]
    evidence_notes: list[str]
    nccl_logs: list[str]
    flight_recorder: list[str]
    #: Communication by class (``docs/traces.md``); absent for windows stored before it.
    comm_classes: CommClasses | None = None


class JobPhases(Contract):
    """The job's captured phases, newest window first; when none, why and how to enable."""

    job_id: str
    captured: bool
    reason: str | None
    how_to_enable: str | None
    windows: list[CaptureWindowDocument]


class JobReportWithPhases(JobReportWithAlerts):
    """One job's report, its alerts and its captured phases (``GET /api/jobs/{id}``,
    ``hpcscope job ID --json``)."""

    phases: JobPhases

    @classmethod
    def join(cls, report: JobReportWithAlerts, phases: JobPhases) -> JobReportWithPhases:
        """The report with its alerts, plus ``phases``."""
        return cls(**dict(report), phases=phases)
