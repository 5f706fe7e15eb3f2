"""Per-rank trace summaries: written where the traces are, merged centrally.

``summarize_traces`` parses traces (in parallel, as :func:`~hpcscope.service.traces.pipeline.
analyze` does) and writes one summary per rank and window
(:mod:`hpcscope.analysis.traces.rank_summary`); ``merge_summaries`` reads them and runs the same
cross-rank analysis, so its result (and JSON) is the one analysing the raw traces gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from hpcscope.analysis.traces.rank_summary import (
    decode_summary,
    encode_summary,
    summarize,
    to_timeline,
)
from hpcscope.analysis.traces.rank_timeline import RankTimeline
from hpcscope.model.errors import SourceError
from hpcscope.service.traces.comm_report import bundled_table
from hpcscope.service.traces.inputs import find_traces, parse_ranks
from hpcscope.service.traces.pipeline import TraceAnalysis, analyze_timelines

#: File name suffix of a written summary.
SUMMARY_SUFFIX = ".hpcsum"


def summary_name(timeline: RankTimeline) -> str:
    """``rank-00003-steps-551-552.hpcsum``: the rank and the window (first and last step)."""
    window = f"steps-{timeline.steps[0]}-{timeline.steps[-1]}" if timeline.steps else "no-steps"
    return f"rank-{timeline.rank:05d}-{window}{SUMMARY_SUFFIX}"


def summarize_traces(
    paths: Iterable[str | Path],
    out: Path,
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Path]:
    """Parse the traces and write one summary per rank into ``out`` (created if missing).

    Raises:
        SourceError: an unreadable trace (file and position named); ``out`` not writable.
    """
    timelines = parse_ranks(
        find_traces(paths), workers=workers, progress=progress, classes=bundled_table()
    )
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for tl in sorted(timelines, key=lambda t: t.rank):
            target = out / summary_name(tl)
            target.write_bytes(encode_summary(summarize(tl)))
            written.append(target)
    except OSError as exc:
        raise SourceError(
            f"cannot write summaries: {exc.strerror or exc}", source=str(out)
        ) from None
    return written


def find_summaries(paths: Iterable[str | Path]) -> list[Path]:
    """Summary files: the files named, and ``*.hpcsum`` under directories (recursively).

    Raises:
        SourceError: a path that does not exist, or no summary at all.
    """
    found: list[Path] = []
    paths = list(paths)
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise SourceError("no such file or directory", source=str(path))
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob(f"*{SUMMARY_SUFFIX}") if p.is_file()))
        else:
            found.append(path)
    if not found:
        raise SourceError(
            f"no trace summaries ({SUMMARY_SUFFIX})", source=", ".join(map(str, paths))
        )
    return found


def read_summaries(paths: Iterable[str | Path]) -> list[RankTimeline]:
    """Every summary under ``paths``, back as per-rank reductions.

    Raises:
        SourceError: an unreadable or invalid summary, or two summaries for one rank.
    """
    timelines: list[RankTimeline] = []
    seen: dict[int, str] = {}
    for file in find_summaries(paths):
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise SourceError(f"cannot read: {exc.strerror or exc}", source=str(file)) from None
        tl = to_timeline(decode_summary(data, source=str(file)), source=str(file))
        if tl.rank in seen:
            raise SourceError(
                f"two summaries for rank {tl.rank}: {seen[tl.rank]} and this one (merge one "
                "window at a time)",
                source=str(file),
            )
        seen[tl.rank] = str(file)
        timelines.append(tl)
    return timelines


def merge_summaries(
    paths: Iterable[str | Path], *, threshold: float = 0.75, world_size: int | None = None
) -> TraceAnalysis:
    """The analysis of every rank's summary: the same result as analysing the raw traces.

    Raises:
        SourceError: see :func:`read_summaries` and
            :func:`~hpcscope.service.traces.pipeline.analyze_timelines`.
    """
    return analyze_timelines(read_summaries(paths), threshold=threshold, world_size=world_size)
