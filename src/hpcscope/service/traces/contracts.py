"""Documents of the trace analyses: ``hpcscope traces analyze --json`` and ``/api/traces``.

``hpcscope traces analyze --json`` is a :class:`TraceAnalysisDocument` (schema
``hpcscope.traces.analysis/1``, described in ``docs/traces.md``); ``GET /api/traces`` a
:class:`TraceList`; ``POST /api/traces`` (and the directory and link endpoints) a
:class:`TraceSummary`; ``GET /api/traces/{id}`` a :class:`TraceReport`.

Keys that are ranks are decimal strings (JSON object keys). Optional keys (``evidence_notes``,
present once the analysis is linked to a job) are left out when absent: serialise with
``exclude_unset=True``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypedDict, cast

from pydantic import ConfigDict, Field, JsonValue, ValidationError

from hpcscope.model.timeutil import iso_z
from hpcscope.service.contract import Contract, Number, Scalar, UtcText
from hpcscope.service.traces.comm_contracts import CommClasses
from hpcscope.service.traces.document import AnalysisJson

if TYPE_CHECKING:  # the CLI validates documents without loading pyarrow (the row's schema)
    from hpcscope.model.trace_analysis import StoredAnalysis


class PhaseSeconds(Contract):
    """Seconds per phase (mean per step, or of one step)."""

    data_load: Number
    forward: Number
    backward: Number
    communication: Number
    optimizer: Number
    barrier_wait: Number
    other: Number


class RankStep(Contract):
    """One rank in one step: its step time and its phases."""

    step_seconds: Number
    data_load: Number
    forward: Number
    backward: Number
    communication: Number
    optimizer: Number
    barrier_wait: Number
    other: Number


class StepEntry(Contract):
    """One common step: the slowest rank, its excess, the median step, each rank's phases."""

    step: int
    slowest_rank: int
    excess_seconds: Number
    step_seconds: Number
    busy_seconds: dict[str, Number]
    ranks: dict[str, RankStep]


class EvidenceItem(Contract):
    """A fact for or against a cause (``kind``: data, network, hardware or software)."""

    kind: str
    supports: bool
    summary: str
    figures: dict[str, Scalar]


class StragglerEntry(Contract):
    """A straggler rank: its phase, its excess per step, the evidence about its cause."""

    rank: int
    phase: str
    excess_seconds_per_step: Number
    score: Number
    phase_excess_seconds_per_step: dict[str, Number]
    unexplained_seconds_per_step: Number
    slow_steps_ratio: Number
    hint: str
    evidence: list[EvidenceItem]


class WhatIf(Contract):
    """The step as measured, without stragglers, and with the worst rank fixed."""

    actual_step_seconds: Number
    ideal_step_seconds: Number
    slowdown: Number
    worst_rank: int | None
    worst_rank_share: Number | None  # None with one rank (no peers to compare)
    fixed_worst_step_seconds: Number


class GpuTime(Contract):
    """A rank's GPU stream time over the profiled steps."""

    kernel_seconds: Number
    idle_seconds: Number
    compute_seconds: Number
    non_compute_seconds: Number


class SoftwareTime(Contract):
    """A rank's software overheads per step (launch gaps: null without a GPU stream)."""

    gc_seconds_per_step: Number
    launch_gap_seconds_per_step: Number | None


class TimeWindow(Contract):
    """The profiled window in UTC."""

    start_utc: UtcText
    end_utc: UtcText


class Collectives(Contract):
    """Collectives matched across ranks and the spread of their ends (clock skew)."""

    matched: int
    unmatched: int
    end_spread_seconds: Number | None


class TraceSource(Contract):
    """One rank's trace file and what was read from it."""

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


class TraceAnalysisDocument(Contract):
    """The ``hpcscope.traces.analysis/1`` document: phases, stragglers, what-if, evidence."""

    schema_: str = Field(alias="schema")
    ranks: list[int]
    steps: int
    step_numbers: list[int]
    partial: bool
    notes: list[str]
    phases: dict[str, PhaseSeconds]
    step_seconds: dict[str, Number]
    per_step: list[StepEntry]
    scores: dict[str, Number]
    busy_median_seconds: dict[str, Number]
    threshold: Number
    stragglers: list[StragglerEntry]
    what_if: WhatIf
    gpu_time: dict[str, GpuTime]
    software: dict[str, SoftwareTime]
    window: TimeWindow | None
    collectives: Collectives
    sources: list[TraceSource]
    evidence_notes: list[str] = Field(default_factory=list)
    comm_classes: CommClasses | None = None

    # ``schema`` would shadow BaseModel.schema(): the field is ``schema_`` in Python only.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_name=True
    )

    @classmethod
    def of(cls, document: AnalysisJson) -> TraceAnalysisDocument:
        """The typed document of a ``to_json`` dict (raises ``ValidationError`` on drift)."""
        return cls.model_validate(document)


def _utc(moment: datetime | None) -> str | None:
    return None if moment is None else iso_z(moment)


class TraceSummary(Contract):
    """One stored analysis without its document (the list, an upload's 201, a link)."""

    analysis_id: str
    owner_user: str
    job_id: str | None
    account: str | None
    created_utc: UtcText
    source_names: list[str]
    ranks: int
    steps: int
    partial: bool
    slowdown: Number | None
    straggler_ranks: list[int]
    window_start_utc: UtcText | None
    window_end_utc: UtcText | None
    url: str

    @classmethod
    def from_row(cls, row: StoredAnalysis) -> TraceSummary:
        """The summary of a stored analysis."""
        return cls(**_summary_fields(row))


class _SummaryFields(TypedDict):
    """:class:`TraceSummary`'s fields, for it and the reports that extend it."""

    analysis_id: str
    owner_user: str
    job_id: str | None
    account: str | None
    created_utc: str
    source_names: list[str]
    ranks: int
    steps: int
    partial: bool
    slowdown: float | None
    straggler_ranks: list[int]
    window_start_utc: str | None
    window_end_utc: str | None
    url: str


def _summary_fields(row: StoredAnalysis) -> _SummaryFields:
    return {
        "analysis_id": row.analysis_id,
        "owner_user": row.owner_user,
        "job_id": row.job_id,
        "account": row.account,
        "created_utc": iso_z(row.created),
        "source_names": list(row.source_names),
        "ranks": row.ranks,
        "steps": row.steps,
        "partial": row.partial,
        "slowdown": row.slowdown,
        "straggler_ranks": list(row.straggler_ranks),
        "window_start_utc": _utc(row.window_start),
        "window_end_utc": _utc(row.window_end),
        "url": f"/traces/{row.analysis_id}",
    }


class TraceList(Contract):
    """The analyses the caller may see, newest first."""

    analyses: list[TraceSummary]


class TraceChart(Contract):
    """Per step, in ms: each rank's busy time and the (median) step; the straggler ranks."""

    steps: list[int]
    step_ms: list[Number]
    busy_ms: dict[str, list[Number]]
    stragglers: list[str]

    @classmethod
    def of(cls, document: TraceAnalysisDocument) -> TraceChart:
        """The chart series of an analysis."""
        ranks = [str(r) for r in document.ranks]
        return cls(
            steps=[s.step for s in document.per_step],
            step_ms=[round(s.step_seconds * 1000, 3) for s in document.per_step],
            busy_ms={
                rank: [round(s.busy_seconds[rank] * 1000, 3) for s in document.per_step]
                for rank in ranks
            },
            stragglers=[str(s.rank) for s in document.stragglers],
        )


class TraceReport(TraceSummary):
    """One analysis: its summary, its document (with the linked job's evidence), its chart."""

    analysis: TraceAnalysisDocument
    chart: TraceChart

    @classmethod
    def of(cls, row: StoredAnalysis, document: AnalysisJson) -> TraceReport | StoredTraceReport:
        """The report of a stored analysis and its (evidence-enriched) document.

        A document that an earlier hpcscope stored and that the current contract no longer
        describes is history, not an error: it comes back as stored, as a
        :class:`StoredTraceReport` that names what differs.
        """
        try:
            analysis = TraceAnalysisDocument.of(document)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in error['loc']) or '(document)'}: {error['msg']}"
                for error in exc.errors()
            ]
            return StoredTraceReport(
                **_summary_fields(row),
                analysis=cast("dict[str, JsonValue]", document),  # as stored
                chart=None,
                contract_problems=problems,
            )
        return cls(**_summary_fields(row), analysis=analysis, chart=TraceChart.of(analysis))


class StoredTraceReport(TraceSummary):
    """An analysis stored by an earlier hpcscope whose document the current contract does not
    describe (a field added or renamed since): the document exactly as stored, no chart, and
    ``contract_problems`` saying where it differs from today's ``TraceAnalysisDocument``."""

    #: The stored JSON object, untouched (the one place a free-form JSON object is emitted:
    #: history is kept as written, never rewritten to fit a newer schema).
    analysis: dict[str, JsonValue]
    chart: None
    contract_problems: list[str]
