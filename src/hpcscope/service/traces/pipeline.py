"""Trace analysis wiring: find the per-rank files, parse them (in parallel when large, see
:mod:`hpcscope.service.traces.inputs`), attribute phases, find stragglers, and shape the result
as the documented JSON contract (``docs/traces.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from hpcscope.analysis.traces.arrays import median as median_of
from hpcscope.analysis.traces.comm_phases import ClassPhases
from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.analysis.traces.phases import PhaseTable, attribute_phases
from hpcscope.analysis.traces.rank_timeline import PHASES as PHASES  # the API and the CLI
from hpcscope.analysis.traces.rank_timeline import RankTimeline
from hpcscope.analysis.traces.straggler_evidence import Evidence, straggler_evidence
from hpcscope.analysis.traces.stragglers import StragglerReport, busy_seconds, straggler_report
from hpcscope.model.errors import SourceError
from hpcscope.model.timeutil import from_epoch_micros, iso_z
from hpcscope.service.traces.comm_report import (
    bundled_table,
    class_notes,
    comm_json,
    comm_phases,
)
from hpcscope.service.traces.document import AnalysisJson, StepJson
from hpcscope.service.traces.inputs import TraceInput, find_traces, parse_ranks

if TYPE_CHECKING:  # a server passes its pool; the command line imports no pool module
    from concurrent.futures import Executor

SCHEMA = "hpcscope.traces.analysis/1"

__all__ = [
    "SCHEMA",
    "TraceAnalysis",
    "TraceInput",
    "analyze",
    "analyze_timelines",
    "find_traces",
    "to_json",
]


@dataclass(frozen=True, slots=True)
class TraceAnalysis:
    """The full result: inputs, phase table, straggler report, evidence from the traces."""

    timelines: tuple[RankTimeline, ...]
    table: PhaseTable
    report: StragglerReport
    evidence: dict[int, tuple[Evidence, ...]] = field(default_factory=dict)
    comm: ClassPhases | None = None


def analyze(
    paths: Iterable[str | Path],
    *,
    threshold: float = 0.75,
    workers: int | None = None,
    executor: Executor | None = None,
    start_method: str = "fork",
    world_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    classes: ClassTable | None = None,
) -> TraceAnalysis:
    """Find, parse and analyse per-rank traces; events are classified with ``classes``
    (default: the bundled ``deploy/kernels/classes.yaml``).

    Raises:
        SourceError: unreadable input (file and position named); a truncated trace does not
            raise, it makes the result partial.
    """
    items = find_traces(paths)
    timelines = parse_ranks(
        items,
        workers=workers,
        executor=executor,
        start_method=start_method,
        progress=progress,
        classes=classes if classes is not None else bundled_table(),
    )
    return analyze_timelines(timelines, threshold=threshold, world_size=world_size)


def analyze_timelines(
    timelines: Sequence[RankTimeline], *, threshold: float = 0.75, world_size: int | None = None
) -> TraceAnalysis:
    """The cross-rank analysis of per-rank reductions: parsed traces (:func:`analyze`) or
    summaries merged centrally (:mod:`hpcscope.service.traces.summaries`).

    Raises:
        SourceError: no step to analyse, naming the ranks' sources.
    """
    table = attribute_phases(timelines, expected_world_size=world_size)
    if not table.steps:
        empty = [t for t in timelines if not t.steps]
        raise SourceError(
            "no event to analyse (the file holds no complete event before it ends)"
            if empty
            else "the ranks have no profiler step in common (ProfilerStep#N)",
            source=", ".join(t.source for t in (empty or timelines)),
        )
    report = straggler_report(table, threshold=threshold)
    evidence = straggler_evidence(table, report, timelines=timelines)
    comm = comm_phases(timelines, table)
    return TraceAnalysis(tuple(timelines), table, report, evidence, comm)


def profiled_window(result: TraceAnalysis) -> tuple[datetime, datetime] | None:
    """The analysed steps in UTC (naive datetimes), from the ranks whose trace says its clock
    (Kineto's ``baseTimeNanoseconds`` or Unix-time stamps); None when none does."""
    starts: list[float] = []
    ends: list[float] = []
    for tl in result.timelines:
        if tl.epoch_offset_us is None or not len(tl.steps):
            continue
        index = [i for i, n in enumerate(tl.steps) if n in set(result.table.steps)]
        if not index:
            continue
        starts.append(float(tl.step_start_us[index].min()) + tl.epoch_offset_us)
        ends.append(float(tl.step_end_us[index].max()) + tl.epoch_offset_us)
    if not starts:
        return None
    return (
        from_epoch_micros(min(starts)),
        from_epoch_micros(max(ends)),
    )


@overload
def _round(value: float, digits: int = 6) -> float: ...
@overload
def _round(value: float | None, digits: int = 6) -> float | None: ...
def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def _mean_on(tl: RankTimeline, per_step: Any, steps: set[int]) -> float:
    values = [float(per_step[i]) for i, n in enumerate(tl.steps) if n in steps]
    return sum(values) / len(values) if values and len(per_step) == len(tl.steps) else 0.0


def to_json(result: TraceAnalysis) -> AnalysisJson:
    """The stable ``--json`` document (schema ``hpcscope.traces.analysis/1``), its keys in the
    order :class:`~hpcscope.service.traces.contracts.TraceAnalysisDocument` declares them."""
    table, report = result.table, result.report
    window = profiled_window(result)
    common = set(table.steps)
    ranks = list(table.ranks)
    mean = table.seconds.mean(axis=1)  # [rank, phase]
    busy = busy_seconds(table)  # [rank, step]
    per_step: list[StepJson] = []
    for s, step in enumerate(table.steps):
        worst = report.per_step[s]
        per_step.append(
            {
                "step": step,
                "slowest_rank": worst.rank,
                "excess_seconds": _round(worst.excess_seconds),
                "step_seconds": _round(float(median_of(table.step_seconds[:, s]))),
                "busy_seconds": {
                    str(rank): _round(float(busy[r, s])) for r, rank in enumerate(ranks)
                },
                "ranks": {
                    str(rank): {
                        "step_seconds": _round(float(table.step_seconds[r, s])),
                        **{p: _round(float(table.seconds[r, s, i])) for i, p in enumerate(PHASES)},
                    }
                    for r, rank in enumerate(ranks)
                },
            }
        )
    what = report.what_if
    gpu = {
        str(t.rank): {
            "kernel_seconds": _round(t.gpu.kernel_seconds),
            "idle_seconds": _round(t.gpu.idle_seconds),
            "compute_seconds": _round(t.gpu.compute_seconds),
            "non_compute_seconds": _round(t.gpu.non_compute_seconds),
        }
        for t in result.timelines
        if t.gpu is not None
    }
    return {
        "schema": SCHEMA,
        "ranks": ranks,
        "steps": len(table.steps),
        "step_numbers": list(table.steps),
        "partial": table.partial,
        "notes": [
            *table.notes,
            *class_notes(
                result.comm,
                float(
                    mean[:, [PHASES.index("communication"), PHASES.index("barrier_wait")]]
                    .sum(axis=1)
                    .mean()
                ),
            ),
        ],
        "phases": {
            str(rank): {p: _round(float(mean[r, i])) for i, p in enumerate(PHASES)}
            for r, rank in enumerate(ranks)
        },
        "step_seconds": {
            str(rank): _round(float(table.step_seconds[r].mean())) for r, rank in enumerate(ranks)
        },
        "per_step": per_step,
        "scores": {str(rank): _round(score, 4) for rank, score in report.scores.items()},
        "busy_median_seconds": {
            str(rank): _round(v) for rank, v in report.busy_median_seconds.items()
        },
        "threshold": report.threshold,
        "stragglers": [
            {
                "rank": s.rank,
                "phase": s.phase,
                "excess_seconds_per_step": _round(s.excess_seconds_per_step),
                "score": _round(s.score, 4),
                "phase_excess_seconds_per_step": {
                    k: _round(v) for k, v in s.phase_excess_seconds_per_step.items()
                },
                "unexplained_seconds_per_step": _round(s.unexplained_seconds_per_step),
                "slow_steps_ratio": _round(s.slow_steps_ratio, 4),
                "hint": s.hint,
                "evidence": [e.to_dict() for e in result.evidence.get(s.rank, ())],
            }
            for s in report.stragglers
        ],
        "what_if": {
            "actual_step_seconds": _round(what.actual_step_seconds),
            "ideal_step_seconds": _round(what.ideal_step_seconds),
            "slowdown": _round(what.slowdown, 4),
            "worst_rank": what.worst_rank,
            "worst_rank_share": _round(what.worst_rank_share, 4),
            "fixed_worst_step_seconds": _round(what.fixed_worst_step_seconds),
        },
        "gpu_time": gpu,
        "software": {
            str(t.rank): {
                "gc_seconds_per_step": _round(_mean_on(t, t.gc_seconds, common)),
                "launch_gap_seconds_per_step": _round(
                    _mean_on(t, t.launch_gap_seconds, common) if t.has_gpu else None
                ),
            }
            for t in result.timelines
        },
        "window": None
        if window is None
        else {
            "start_utc": iso_z(window[0], timespec="microseconds"),
            "end_utc": iso_z(window[1], timespec="microseconds"),
        },
        "collectives": {
            "matched": table.collectives_matched,
            "unmatched": table.collectives_unmatched,
            "end_spread_seconds": _round(table.skew_seconds),
        },
        "sources": [
            {
                "rank": t.rank,
                "file": t.source,
                "events": t.events,
                "json_bytes": t.bytes_read,
                "backend": t.backend,
                "world_size": t.world_size,
                "device": t.device,
                "host": t.host,
                "gpu_index": t.gpu_index,
                "markers": list(t.markers),
                "problems": list(t.problems),
            }
            for t in result.timelines
        ],
        # after "sources", as TraceAnalysisDocument declares it: the CLI prints this dict as it
        # is, in the contract's order (tests/cli/test_fast_path.py)
        "comm_classes": comm_json(result.comm),
    }
