"""Trace analysis wiring: find the per-rank files, parse ranks in parallel, attribute phases,
find stragglers, and shape the result as the documented JSON contract (``docs/traces.md``).

Ranks parse in worker processes (one file per task, at most one worker per CPU core). Workers
run :func:`_parse_rank` only: the parser and the per-rank reduction, both pure of any store;
what comes back is a small :class:`~hpcscope.analysis.rank_timeline.RankTimeline`. The CLI
forks (nothing is open yet); a server that holds the DuckDB file must use ``forkserver`` or
``spawn`` (never fork a process with DuckDB open).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import tarfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcscope.analysis.phases import PhaseTable, attribute_phases
from hpcscope.analysis.rank_timeline import PHASES, RankTimeline, rank_timeline
from hpcscope.analysis.stragglers import StragglerReport, straggler_report
from hpcscope.ingest.kineto import TraceError, read_kineto
from hpcscope.model.errors import SourceError

SCHEMA = "hpcscope.traces.analysis/1"
_TRACE_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


@dataclass(frozen=True, slots=True)
class TraceInput:
    """One rank's trace: a file, or a member of a tar archive."""

    path: str
    member: str | None = None

    @property
    def name(self) -> str:
        return f"{self.path}:{self.member}" if self.member else self.path


@dataclass(frozen=True, slots=True)
class TraceAnalysis:
    """The full result: inputs, phase table, straggler report."""

    timelines: tuple[RankTimeline, ...]
    table: PhaseTable
    report: StragglerReport


def find_traces(paths: Iterable[str | Path]) -> list[TraceInput]:
    """Expand directories (recursively) and tar archives into per-rank trace inputs.

    Raises:
        SourceError: a path that does not exist, or no trace found at all.
    """
    found: list[TraceInput] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise SourceError("no such file or directory", source=str(path))
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in candidates:
            name = file.name.lower()
            if name.endswith(_ARCHIVE_SUFFIXES):
                found.extend(_archive_members(file))
            elif name.endswith(_TRACE_SUFFIXES) or not path.is_dir():
                found.append(TraceInput(str(file)))
    if not found:
        raise SourceError(
            "no trace files (.json, .json.gz, or a tar of them)",
            source=", ".join(str(p) for p in paths),
        )
    return found


def _archive_members(file: Path) -> list[TraceInput]:
    try:
        with tarfile.open(file) as archive:
            members = [
                m.name
                for m in archive.getmembers()
                if m.isfile()
                and m.name.lower().endswith(_TRACE_SUFFIXES)
                and not Path(m.name).name.startswith("._")
            ]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SourceError(f"cannot read archive: {exc}", source=str(file)) from None
    return [TraceInput(str(file), member) for member in sorted(members)]


_ErrorTuple = tuple[str, str, int | None, int | None]


def _parse_rank(item: TraceInput) -> RankTimeline | _ErrorTuple:
    """Worker: parse one rank and reduce it. Errors come back as plain tuples (message,
    source, line, column), which pickle whatever the exception class."""
    try:
        return _parse_rank_or_raise(item)
    except SourceError as exc:
        return (exc.message, exc.source, exc.line, exc.column)


def _parse_rank_or_raise(item: TraceInput) -> RankTimeline:
    try:
        if item.member is None:
            trace = read_kineto(item.path)
        else:
            with tarfile.open(item.path) as archive:
                handle = archive.extractfile(item.member)
                if handle is None:
                    raise TraceError("not a regular file in the archive", source=item.name)
                trace = read_kineto(item.member, source=item.name, stream=io.BytesIO(handle.read()))
        return rank_timeline(trace)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise TraceError(f"cannot read: {exc}", source=item.name) from None


def parse_ranks(
    items: Sequence[TraceInput],
    *,
    workers: int | None = None,
    start_method: str = "fork",
    progress: Callable[[int, int], None] | None = None,
) -> list[RankTimeline]:
    """Parse every rank, in parallel processes when there are several.

    Raises:
        SourceError: the first file that cannot be read (naming it and the position), or two
            traces that claim the same rank.
    """
    workers = max(1, min(workers or os.cpu_count() or 1, len(items)))
    results: list[RankTimeline | _ErrorTuple] = []
    if workers == 1:
        for i, item in enumerate(items):
            results.append(_parse_rank(item))
            if progress:
                progress(i + 1, len(items))
    else:
        context = multiprocessing.get_context(start_method)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            for i, result in enumerate(pool.map(_parse_rank, items)):
                results.append(result)
                if progress:
                    progress(i + 1, len(items))
    timelines: list[RankTimeline] = []
    seen: dict[int, str] = {}
    for result in results:
        if isinstance(result, tuple):
            message, source, line, column = result
            raise TraceError(message, source=source, line=line, column=column)
        if result.rank in seen:
            raise SourceError(
                f"two traces for rank {result.rank}: {seen[result.rank]} and this one",
                source=result.source,
            )
        seen[result.rank] = result.source
        timelines.append(result)
    return timelines


def analyze(
    paths: Iterable[str | Path],
    *,
    threshold: float = 0.75,
    workers: int | None = None,
    start_method: str = "fork",
    world_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TraceAnalysis:
    """Find, parse and analyse per-rank traces.

    Raises:
        SourceError: unreadable input (file and position named); a truncated trace does not
            raise, it makes the result partial.
    """
    items = find_traces(paths)
    timelines = parse_ranks(items, workers=workers, start_method=start_method, progress=progress)
    table = attribute_phases(timelines, expected_world_size=world_size)
    if not table.steps:
        raise SourceError(
            "the ranks have no profiler step in common (ProfilerStep#N)",
            source=", ".join(t.source for t in timelines),
        )
    return TraceAnalysis(tuple(timelines), table, straggler_report(table, threshold=threshold))


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def to_json(
    result: TraceAnalysis, *, evidence: dict[int, list[str]] | None = None
) -> dict[str, Any]:
    """The stable ``--json`` document (schema ``hpcscope.traces.analysis/1``)."""
    table, report = result.table, result.report
    ranks = list(table.ranks)
    mean = table.seconds.mean(axis=1)  # [rank, phase]
    per_step = []
    for s, step in enumerate(table.steps):
        worst = report.per_step[s]
        per_step.append(
            {
                "step": step,
                "slowest_rank": worst.rank,
                "excess_seconds": _round(worst.excess_seconds),
                "step_seconds": _round(float(table.step_seconds[:, s].mean())),
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
        "notes": list(table.notes),
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
                "evidence": (evidence or {}).get(s.rank, []),
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
                "markers": list(t.markers),
                "problems": list(t.problems),
            }
            for t in result.timelines
        ],
    }
