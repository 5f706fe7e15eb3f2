"""The trace analysis document as the code builds and reads it: plain JSON values, typed.

:func:`hpcscope.service.traces.pipeline.to_json` builds an :class:`AnalysisJson` and the
command line prints it as it is (pydantic stays out of the command's start-up); the API
validates it as :class:`~hpcscope.service.traces.contracts.TraceAnalysisDocument`, which
declares the same keys (a test holds the two together). A stored document is read back as
this type too: one that an earlier version stored and the contract no longer describes is
shown as stored (:class:`~hpcscope.service.traces.contracts.StoredTraceReport`).

Standard library only: the light command-line path imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:
    from hpcscope.analysis.traces.straggler_evidence import EvidenceJson


class StepJson(TypedDict):
    """One common step: the slowest rank, its excess, the median step, and by rank its busy
    time and its figures (``step_seconds`` and each of ``PHASES``)."""

    step: int
    slowest_rank: int
    excess_seconds: float
    step_seconds: float
    busy_seconds: dict[str, float]
    ranks: dict[str, dict[str, float]]


class StragglerJson(TypedDict):
    """A straggler rank: its phase, its excess per step, the evidence about its cause."""

    rank: int
    phase: str
    excess_seconds_per_step: float
    score: float
    phase_excess_seconds_per_step: dict[str, float]
    unexplained_seconds_per_step: float
    slow_steps_ratio: float
    hint: str
    evidence: list[EvidenceJson]


class WhatIfJson(TypedDict):
    """The step time without the slowest rank's excess."""

    actual_step_seconds: float
    ideal_step_seconds: float
    slowdown: float
    worst_rank: int | None
    worst_rank_share: float | None  # None with one rank (no peers to compare)
    fixed_worst_step_seconds: float


class WindowJson(TypedDict):
    """The profiled window, UTC."""

    start_utc: str
    end_utc: str


class CollectivesJson(TypedDict):
    """Collectives matched across ranks, and the spread of their ends."""

    matched: int
    unmatched: int
    end_spread_seconds: float | None


class SourceJson(TypedDict):
    """One rank's trace: its file, size, and what its metadata says."""

    rank: int
    file: str
    events: int
    json_bytes: int
    backend: str | None
    world_size: int | None
    device: str | None
    host: str | None
    gpu_index: int | None
    markers: list[str]
    problems: list[str]


#: One communication class over the analysed steps (``class`` is a keyword: functional form).
CommClassJson = TypedDict(
    "CommClassJson",
    {
        "class": str,
        "label": str,
        "seconds_per_step": dict[str, float],
        "hidden_seconds_per_step": dict[str, float],
        "exposed_seconds_per_step": dict[str, float],
        "hidden_ratio": float | None,
        "what_if_gain_seconds": float,
        "what_if_gain_ratio": float | None,
    },
)


class CommSecondsJson(TypedDict):
    """A class on one rank in one step."""

    seconds: float
    hidden_seconds: float
    exposed_seconds: float


class CommRankStepJson(TypedDict):
    """One rank in one step: its compute that can hide a transfer, its bubble, its classes."""

    compute_seconds: float
    bubble_seconds: float
    classes: dict[str, CommSecondsJson]


class CommStepJson(TypedDict):
    """One step of the classes, by rank."""

    step: int
    ranks: dict[str, CommRankStepJson]


#: A rank that waits on one class of transfer.
CommStragglerJson = TypedDict(
    "CommStragglerJson",
    {"rank": int, "class": str, "message": str, "wait_seconds_per_step": float},
)


class UnclassifiedJson(TypedDict):
    """Events of one name no class rule matches, on one rank."""

    rank: int
    name: str
    seconds: float


class CommClassesJson(TypedDict):
    """The ``comm_classes`` section (``hpcscope.traces.comm-classes/1``)."""

    schema: str
    classes: list[CommClassJson]
    bubble_seconds_per_step: dict[str, float]
    per_step: list[CommStepJson]
    stragglers: list[CommStragglerJson]
    unclassified: list[UnclassifiedJson]
    unclassified_seconds: float


class AnalysisJson(TypedDict):
    """The ``hpcscope.traces.analysis/1`` document, keys in the contract's order."""

    schema: str
    ranks: list[int]
    steps: int
    step_numbers: list[int]
    partial: bool
    notes: list[str]
    phases: dict[str, dict[str, float]]  # by rank, then by phase
    step_seconds: dict[str, float]
    per_step: list[StepJson]
    scores: dict[str, float]
    busy_median_seconds: dict[str, float]
    threshold: float
    stragglers: list[StragglerJson]
    what_if: WhatIfJson
    gpu_time: dict[str, dict[str, float]]  # by rank: kernel, idle, compute, non-compute
    software: dict[str, dict[str, float | None]]  # by rank: GC, launch gaps (None: no GPU)
    window: WindowJson | None
    collectives: CollectivesJson
    sources: list[SourceJson]
    evidence_notes: NotRequired[list[str]]  # added when evidence is linked to a job
    comm_classes: CommClassesJson | None


class PlacementJson(TypedDict):
    """Where a captured rank ran, and the job the platform names there."""

    node: str
    gpu: int | None
    job_id: str | None


class CapturePayloadJson(TypedDict):
    """A stored capture window: its analysis, its ranks' placement, its files beside it."""

    analysis: AnalysisJson
    placement: dict[str, PlacementJson]
    nccl_logs: list[str]
    flight_recorder: list[str]
