"""Seconds per phase, per rank and per profiler step, with barrier wait split from communication.

Input: one :class:`~hpcscope.analysis.traces.rank_timeline.RankTimeline` per rank. Output: a
:class:`PhaseTable` whose seven phases add up, for every rank and step, to the step's duration.

**Barrier wait.** The same collective is matched across ranks by (step, type and process group,
order within the step). When every trace comes from the same host (Kineto's ``host_name``), the
ranks share one clock and ``wait = last arrival - own arrival`` (clipped to the instance). Across
hosts, clocks are skewed, so the wait comes from durations only: a collective cannot complete
before the last rank has arrived, so the last arrival has the shortest instance (the transfer
itself) and ``wait = duration - shortest duration`` (equal to the arrival difference when the
instances end together); clock skew cannot bias it. The end times are compared only to
*report* skew. The rest of the collective is communication.

**Labelling.** Every instant of a step window gets one phase, by priority. GPU runs (NCCL
kernels): GPU compute (by the phase that launched it) > communication > barrier wait > CPU
regions (data, optimizer, backward, forward) > other. CPU-only runs (gloo): data region > CPU
operators executing (by region) > communication > barrier wait > the rest of the regions >
other. So DDP's bucketed AllReduce that overlaps backward computation counts as backward, and
only its exposed part counts as communication or wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import distinct
from hpcscope.analysis.traces.arrays import median as median_of
from hpcscope.analysis.traces.intervals import Intervals, clip, merge
from hpcscope.analysis.traces.rank_timeline import PHASES, REGION_PHASES, RankTimeline

F64 = npt.NDArray[np.float64]

#: Minimum median spread (µs) of the end of matched collectives that is reported as skew.
SKEW_REPORT_US = 1000.0


@dataclass(frozen=True, slots=True)
class PhaseTable:
    """Phase seconds for ``ranks`` x ``steps``.

    Attributes:
        ranks: analysed ranks, ascending.
        steps: profiler step numbers present on every rank, ascending.
        seconds: array ``[rank, step, phase]`` of seconds (phases in :data:`PHASES` order).
        step_seconds: array ``[rank, step]``: each rank's step duration (sum over phases).
        collectives_matched / collectives_unmatched: instances matched on all ranks / not.
        skew_seconds: median spread of the end time of matched collectives across ranks
            (clock skew plus real end spread); None without matched collectives.
        notes: what the reader must know (dropped steps, missing ranks, skew...).
        partial: True when something is missing (rank, steps, truncated file).
    """

    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    seconds: F64
    step_seconds: F64
    collectives_matched: int
    collectives_unmatched: int
    skew_seconds: float | None
    notes: tuple[str, ...]
    partial: bool

    def phase(self, name: str) -> F64:
        """``[rank, step]`` seconds of one phase."""
        return self.seconds[:, :, PHASES.index(name)]


def collective_waits(timelines: Sequence[RankTimeline]) -> tuple[list[F64], int, int, float | None]:
    """Barrier wait (µs) of every collective instance of every rank.

    Instances are grouped by (step number, type and process group, ordinal) with one sort over
    every rank's instances (no per-instance Python: a 256-rank capture of 2,000 collectives per
    rank is half a million instances).

    Returns:
        Per rank an array aligned with its ``collective_*`` arrays; the number of matched
        and unmatched instances; the median end-time spread (µs) of matched instances.
    """
    waits = [np.zeros(tl.collective_step.shape[0]) for tl in timelines]
    key_codes: dict[str, int] = {}
    parts: list[tuple[npt.NDArray[np.int64], ...]] = []
    times: list[tuple[F64, F64]] = []
    for r, tl in enumerate(timelines):
        rows = np.flatnonzero(tl.collective_step >= 0)
        if not rows.shape[0]:
            continue
        codes = np.array(
            [key_codes.setdefault(k, len(key_codes)) for k in tl.collective_keys], dtype=np.int64
        )
        numbers = np.array(tl.steps, dtype=np.int64)
        parts.append(
            (
                numbers[tl.collective_step[rows]],
                codes[tl.collective_key[rows]],
                tl.collective_ordinal[rows].astype(np.int64),
                np.full(rows.shape[0], r, dtype=np.int64),
                rows.astype(np.int64),
            )
        )
        times.append((tl.collective_start_us[rows], tl.collective_end_us[rows]))
    if not parts:
        return waits, 0, 0, None
    step, key, ordinal, rank, row = (np.concatenate(column) for column in zip(*parts, strict=True))
    start = np.concatenate([t[0] for t in times])
    end = np.concatenate([t[1] for t in times])
    order = np.lexsort((rank, ordinal, key, step))
    step, key, ordinal, rank, row = step[order], key[order], ordinal[order], rank[order], row[order]
    start, end = start[order], end[order]
    new = np.ones(step.shape[0], dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (key[1:] != key[:-1]) | (ordinal[1:] != ordinal[:-1])
    first = np.flatnonzero(new)
    size = np.diff(np.append(first, step.shape[0]))
    group = np.repeat(np.arange(first.shape[0]), size)
    n = len(timelines)
    matched = int(size[size == n].sum()) if n >= 2 else 0
    unmatched = int(size.sum()) - matched
    durs = end - start
    starts = end - durs  # as the per-group arithmetic always did: the same floats
    hosts = {tl.host for tl in timelines}
    same_clock = len(hosts) == 1 and None not in hosts
    # np.where, not np.maximum/np.minimum: Python's max(0.0, x) and min(x, d), exactly
    if same_clock:
        ahead = np.maximum.reduceat(starts, first)[group] - starts
        ahead = np.where(ahead > 0.0, ahead, 0.0)
        wait = np.where(durs < ahead, durs, ahead)
    else:
        excess = durs - np.minimum.reduceat(durs, first)[group]
        wait = np.where(excess > 0.0, excess, 0.0)
    shared = size[group] >= 2  # an instance no other rank has waits for nobody
    spread = np.maximum.reduceat(end, first) - np.minimum.reduceat(end, first)
    chosen = np.flatnonzero(shared)
    chosen = chosen[np.argsort(rank[chosen], kind="stable")]
    bounds = np.searchsorted(rank[chosen], np.arange(n + 1))
    for r in range(n):
        mine = chosen[bounds[r] : bounds[r + 1]]
        waits[r][row[mine]] = wait[mine]
    spreads = spread[size >= 2]
    skew = float(median_of(spreads)) if spreads.shape[0] else None
    return waits, matched, unmatched, skew


def _ordered(iv: Intervals) -> bool:
    """Whether both ends of ``iv`` are non-decreasing (true of every merged set), so that the
    intervals meeting a window are one slice of it (:func:`_clip_to`)."""
    return len(iv) < 2 or bool(
        (iv.start[1:] >= iv.start[:-1]).all() and (iv.end[1:] >= iv.end[:-1]).all()
    )


def _clip_to(iv: Intervals, ordered: bool, lo: float, hi: float) -> Intervals:
    """``clip(iv, lo, hi)``, the same arrays; for an ordered set only the slice of intervals
    that end after ``lo`` and start before ``hi`` is clipped (the others clip to nothing), not
    the whole rank's set once per step."""
    if ordered and len(iv):
        first = int(np.searchsorted(iv.end, lo, side="right"))
        stop = max(first, int(np.searchsorted(iv.start, hi, side="left")))
        iv = Intervals(iv.start[first:stop], iv.end[first:stop])
    return clip(iv, lo, hi)


def _label(window: tuple[float, float], sources: list[tuple[int, Intervals, bool]]) -> F64:
    """Seconds per phase in ``window``: each instant goes to the first source covering it
    (``(phase, intervals, ordered)``, see :func:`_ordered`)."""
    lo, hi = window
    out = np.zeros(len(PHASES))
    if hi <= lo:
        return out
    clipped = [(phase, _clip_to(iv, ordered, lo, hi), ordered) for phase, iv, ordered in sources]
    points = [np.array([lo, hi])]
    points += [iv.start for _, iv, _ in clipped] + [iv.end for _, iv, _ in clipped]
    edges = distinct(np.concatenate(points))
    length = np.diff(edges)
    mid = (edges[:-1] + edges[1:]) / 2
    label = np.full(mid.shape[0], PHASES.index("other"), dtype=np.int64)
    free = np.arange(mid.shape[0])  # the midpoints no source has claimed yet
    for phase, iv, ordered in clipped:
        if not len(iv) or not free.shape[0]:
            continue
        if ordered:
            at = mid[free]
            index = np.searchsorted(iv.start, at, side="right") - 1
            inside = (index >= 0) & (iv.end[np.clip(index, 0, None)] > at)
        else:  # every instant searched, as first written: in an unsorted set a binary
            # search's answer depends on the queries before it
            index = np.searchsorted(iv.start, mid, side="right") - 1
            inside = ((index >= 0) & (iv.end[np.clip(index, 0, None)] > mid))[free]
        label[free[inside]] = phase
        free = free[~inside]
    np.add.at(out, label, length)
    return out / 1e6


def _sources(tl: RankTimeline, comm: Intervals, wait: Intervals) -> list[tuple[int, Intervals]]:
    p = PHASES.index
    regions = [(p(name), tl.regions[name]) for name in REGION_PHASES]
    collectives = [(p("barrier_wait"), wait), (p("communication"), comm)]
    if tl.has_gpu:
        gpu = [
            (p(name), tl.gpu_compute.get(name, Intervals.empty()))
            for name in ("backward", "forward", "optimizer", "data_load", "other")
        ]
        return gpu + collectives + regions
    busy = [
        (p(name), tl.cpu_busy.get(name, Intervals.empty()))
        for name in ("optimizer", "backward", "forward", "other")
    ]
    return [regions[0], *busy, *collectives, *regions[1:]]


def attribute_phases(
    timelines: Sequence[RankTimeline], *, expected_world_size: int | None = None
) -> PhaseTable:
    """Seconds per phase for every rank and every step common to all ranks.

    Args:
        timelines: one per rank (distinct ranks).
        expected_world_size: ranks the job had (default: ``world_size`` of the traces); ranks
            below it that have no trace are reported missing and the result is partial.

    Returns:
        The phase table; ``partial`` and ``notes`` say what was missing.
    """
    timelines = sorted(timelines, key=lambda t: t.rank)
    notes: list[str] = []
    partial = False
    for tl in timelines:
        for problem in tl.problems:
            notes.append(f"rank {tl.rank} ({tl.source}): {problem}")
            partial = partial or "kept the events" in problem
    ranks = tuple(tl.rank for tl in timelines)
    world = expected_world_size or max((tl.world_size or 0 for tl in timelines), default=0)
    missing = sorted(set(range(world)) - set(ranks)) if world else []
    if missing:
        partial = True
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        notes.append(
            f"{len(missing)} of {world} ranks have no trace ({shown}): barrier wait is measured "
            "against the ranks present only"
        )
    common = set(timelines[0].steps) if timelines else set()
    for tl in timelines[1:]:
        common &= set(tl.steps)
    steps = tuple(sorted(common))
    for tl in timelines:
        extra = sorted(set(tl.steps) - common)
        if extra:
            partial = True
            notes.append(f"rank {tl.rank}: steps {extra} are not on every rank and were left out")
    waits, matched, unmatched, skew = collective_waits(timelines)
    if unmatched:
        notes.append(
            f"{unmatched} collective instances could not be matched on every rank "
            "(their wait is measured against the ranks that have them)"
        )
    hosts = {tl.host for tl in timelines}
    if skew is not None and skew > SKEW_REPORT_US and not (len(hosts) == 1 and None not in hosts):
        notes.append(
            f"the same collectives end {skew / 1000:.1f} ms apart across ranks (median): clock "
            "skew between nodes; barrier wait uses durations, which do not depend on it"
        )
    seconds = np.zeros((len(ranks), len(steps), len(PHASES)))
    step_seconds = np.zeros((len(ranks), len(steps)))
    for r, tl in enumerate(timelines):
        start, end, wait = tl.collective_start_us, tl.collective_end_us, waits[r]
        wait_iv = merge(start, start + np.minimum(wait, end - start))
        comm_iv = merge(start + np.minimum(wait, end - start), end)
        sources = [(phase, iv, _ordered(iv)) for phase, iv in _sources(tl, comm_iv, wait_iv)]
        index = {number: i for i, number in enumerate(tl.steps)}
        for s, number in enumerate(steps):
            i = index[number]
            window = (float(tl.step_start_us[i]), float(tl.step_end_us[i]))
            seconds[r, s] = _label(window, sources)
            step_seconds[r, s] = (window[1] - window[0]) / 1e6
    return PhaseTable(
        ranks=ranks,
        steps=steps,
        seconds=seconds,
        step_seconds=step_seconds,
        collectives_matched=matched,
        collectives_unmatched=unmatched,
        skew_seconds=None if skew is None else skew / 1e6,
        notes=tuple(notes),
        partial=partial,
    )
