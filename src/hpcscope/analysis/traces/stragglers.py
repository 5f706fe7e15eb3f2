"""Stragglers from a phase table: who, in which phase, and what fixing them would give.

Definitions (all per rank and step, from :class:`~hpcscope.analysis.traces.phases.PhaseTable`):

* **step** ``T_s`` = the median over ranks of the step's duration. Every rank of a synchronous
  job runs each step in the same time; the ranks' own ``ProfilerStep`` windows differ only
  where they start (a rank that began the step, or the profiling window, earlier than its
  peers simply waits longer at the first collective).
* **busy** = ``T_s`` - barrier wait: how long the step would have taken if this rank had never
  waited for a peer. The barrier-wait model gives ``wait_i = last arrival - arrival_i``, so
  ``busy_i - busy_j = arrival_i - arrival_j``: busy orders the ranks by how late they arrive,
  which is the definition of the rank the others wait for. It does not depend on where each
  rank's step window starts (an own-window busy does, and on traces of one step it blames the
  rank that started profiling first).
* **slowest rank of a step** = largest busy; its **excess** = its busy - the median busy of
  the other ranks.
* **score** (NVRx-style relative score, ``nvidia_resiliency_ext.attribution.straggler``):
  reference median / this rank's median busy over the steps. NVRx takes the fastest rank as
  the reference; here the reference is the median of the rank's peers (the other ranks),
  because the fastest by busy is the rank that waited longest, and a rank can wait long for
  reasons of its own (it started the profiled step early), and because with few ranks a second
  noisy rank would otherwise be the reference. 1 = as fast as its peers' median, 0.5 = twice
  as slow, above 1 faster.
* **straggler** = a rank whose score is below ``threshold`` (NVRx's default 0.75), whose median
  excess over its peers is at least ``min_excess_ratio`` of the step, and which is that much
  slower than its peers in at least half of the steps: a rank that was slow in one noisy step
  is not a straggler. Medians over steps ignore single hiccups (as NVRx's do).
* **phase that makes it slow** = the phase (barrier wait aside) whose median seconds exceed the
  peers' median by the most.
* **What-if** (OSDI'25, "Understanding Stragglers in Large Model Training Using What-if
  Analysis", for data parallelism): the ideal step is the step every rank would run at the
  peer median: per step, the median busy of the *peers of the worst rank* (every rank but the
  one with the largest median busy). Including the worst rank would make the median the
  slower half of the healthy ranks (with three ranks: the slower of the two healthy ones),
  measured +1.4 ms per 28 ms step over 40 injected DDP runs, i.e. a slowdown 5 % too low.
  ``slowdown = actual / ideal`` over all steps (``actual`` = the mean of ``T_s``);
  ``worst_rank_share`` = share of ``actual - ideal`` removed by giving only the worst rank the
  ideal busy time, the others keeping theirs (the step then lasts as long as the largest
  remaining busy time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import median as median_of
from hpcscope.analysis.traces.phases import PhaseTable
from hpcscope.analysis.traces.rank_timeline import PHASES

F64 = npt.NDArray[np.float64]

#: Phases a rank can be slow in (barrier wait is the consequence, not a cause).
CAUSE_PHASES = tuple(p for p in PHASES if p != "barrier_wait")


@dataclass(frozen=True, slots=True)
class StepStraggler:
    """The slowest rank of one step."""

    step: int
    rank: int
    busy_seconds: float
    excess_seconds: float
    step_seconds: float


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank slower than its peers over the run.

    Attributes:
        rank: the rank.
        phase: the phase that makes it slow (largest median excess over the peers).
        excess_seconds_per_step: median over steps of its busy minus its peers' median busy.
        score: its peers' median of median busy / its own median busy.
        slow_steps_ratio: share of the steps in which it was at least the minimum excess
            slower than its peers.
        phase_excess_seconds_per_step: every cause phase's median excess over the peers.
        unexplained_seconds_per_step: the part of the excess its own phases do not account
            for (excess minus the positive phase excesses, at least 0): time the others waited
            for it that lies before its step window, i.e. it began the step later than them.
        hint: what the phase usually means (data, compute, network, software).
    """

    rank: int
    phase: str
    excess_seconds_per_step: float
    score: float
    slow_steps_ratio: float = 1.0
    phase_excess_seconds_per_step: dict[str, float] = field(default_factory=dict)
    unexplained_seconds_per_step: float = 0.0
    hint: str = ""


@dataclass(frozen=True, slots=True)
class WhatIf:
    """OSDI'25 what-if figures over all analysed steps."""

    actual_step_seconds: float
    ideal_step_seconds: float
    slowdown: float
    worst_rank: int | None
    worst_rank_share: float | None
    fixed_worst_step_seconds: float


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """Everything the straggler section of a report shows."""

    per_step: tuple[StepStraggler, ...]
    scores: dict[int, float]
    busy_median_seconds: dict[int, float]
    stragglers: tuple[Straggler, ...]
    what_if: WhatIf
    threshold: float


HINTS = {
    "data_load": "data: the input pipeline of this rank is slow (DataLoader workers, storage "
    "reads, preprocessing)",
    "forward": "compute: this rank computes more slowly (GPU clocks throttled, thermal, a faulty "
    "GPU) or has more work (uneven batch or sequence lengths)",
    "backward": "compute: this rank computes more slowly (GPU clocks throttled, thermal, a faulty "
    "GPU) or has more work (uneven batch or sequence lengths)",
    "optimizer": "compute: the optimizer step is slower on this rank (uneven parameter "
    "sharding, CPU offload, throttled GPU)",
    "communication": "network: this rank's collectives transfer more slowly (link, NIC, "
    "InfiniBand errors, topology)",
    "other": "software: time outside the recognised phases (GC pauses, CPU launch gaps, "
    "logging, checkpointing, Python overhead)",
}

#: Added when most of a straggler's excess lies before its own step window.
LATE_START_HINT = (
    "; most of the time its peers wait for it is not inside its own phases: it began the "
    "step later than them (a slow end of the previous step, or profiling started later on "
    "this rank), so look at what precedes the step too"
)


def busy_seconds(table: PhaseTable) -> F64:
    """``[rank, step]`` busy seconds: the step (median over ranks) minus the barrier wait."""
    common: F64 = median_of(table.step_seconds, axis=0)  # [step]
    return common[np.newaxis, :] - table.phase("barrier_wait")


def straggler_report(
    table: PhaseTable, *, threshold: float = 0.75, min_excess_ratio: float = 0.02
) -> StragglerReport:
    """Slowest rank per step, per-rank scores, stragglers with their phase, and what-if.

    Args:
        table: phase seconds ``[rank, step, phase]``.
        threshold: score below which a rank is a straggler (NVRx default 0.75).
        min_excess_ratio: a straggler's median excess must also be at least this share of the
            median step, in at least half of the steps (guards against flagging noise).

    Returns:
        The report; ``stragglers`` is empty when there is none.
    """
    ranks = table.ranks
    n_ranks, n_steps = table.step_seconds.shape
    if n_ranks == 0 or n_steps == 0:
        empty = WhatIf(0.0, 0.0, 1.0, None, None, 0.0)
        return StragglerReport((), {}, {}, (), empty, threshold)
    busy = busy_seconds(table)  # [rank, step]
    step_common = median_of(table.step_seconds, axis=0)
    per_step: list[StepStraggler] = []
    for s, step in enumerate(table.steps):
        r = int(np.argmax(busy[:, s]))
        peers = np.delete(busy[:, s], r)
        excess = float(busy[r, s] - median_of(peers)) if peers.size else 0.0
        per_step.append(StepStraggler(step, ranks[r], float(busy[r, s]), excess, step_common[s]))
    busy_median = median_of(busy, axis=1)
    reference = np.array(
        [
            float(median_of(np.delete(busy_median, r))) if n_ranks > 1 else busy_median[r]
            for r in range(n_ranks)
        ]
    )
    scores = np.where(busy_median > 0, reference / np.where(busy_median > 0, busy_median, 1), 1.0)
    phase_median = median_of(table.seconds, axis=1)  # [rank, phase]
    median_step = float(median_of(step_common))
    stragglers: list[Straggler] = []
    for r in range(n_ranks):
        peers = np.delete(np.arange(n_ranks), r)
        if not peers.size:
            break
        excess_by_step = busy[r] - median_of(busy[peers], axis=0)
        excess = float(median_of(excess_by_step))
        slow_share = float(np.mean(excess_by_step >= min_excess_ratio * step_common))
        if scores[r] >= threshold or excess < min_excess_ratio * median_step or slow_share < 0.5:
            continue
        phase_excess = {
            name: float(phase_median[r, i] - median_of(phase_median[peers, i]))
            for i, name in enumerate(PHASES)
            if name in CAUSE_PHASES
        }
        phase = max(phase_excess, key=lambda k: phase_excess[k])
        unexplained = max(0.0, excess - sum(v for v in phase_excess.values() if v > 0))
        hint = HINTS[phase]
        if unexplained > excess / 2:
            hint += LATE_START_HINT
        stragglers.append(
            Straggler(
                rank=ranks[r],
                phase=phase,
                excess_seconds_per_step=excess,
                score=float(scores[r]),
                slow_steps_ratio=slow_share,
                phase_excess_seconds_per_step=phase_excess,
                unexplained_seconds_per_step=unexplained,
                hint=hint,
            )
        )
    stragglers.sort(key=lambda s: s.score)
    return StragglerReport(
        per_step=tuple(per_step),
        scores={ranks[r]: float(scores[r]) for r in range(n_ranks)},
        busy_median_seconds={ranks[r]: float(busy_median[r]) for r in range(n_ranks)},
        stragglers=tuple(stragglers),
        what_if=what_if(table, busy=busy, worst=int(np.argmax(busy_median))),
        threshold=threshold,
    )


def what_if(table: PhaseTable, *, busy: F64, worst: int) -> WhatIf:
    """Ideal step (every rank at the peer median), slowdown, worst-rank share.

    Args:
        table: phase seconds.
        busy: ``[rank, step]`` busy seconds (:func:`busy_seconds`).
        worst: row of the rank to fix alone (the one with the largest median busy); the
            ideal is the median over the other ranks (all ranks when there is only one).
    """
    actual = median_of(table.step_seconds, axis=0)  # [step]
    peers = np.delete(busy, worst, axis=0) if busy.shape[0] > 1 else busy
    ideal = median_of(peers, axis=0)  # [step]
    fixed_busy = busy.copy()
    fixed_busy[worst, :] = ideal
    fixed = actual - (busy.max(axis=0) - fixed_busy.max(axis=0))
    total_actual, total_ideal, total_fixed = (
        float(actual.sum()),
        float(ideal.sum()),
        float(fixed.sum()),
    )
    n = actual.shape[0]
    gap = total_actual - total_ideal
    share = (total_actual - total_fixed) / gap if gap > 1e-12 else None
    return WhatIf(
        actual_step_seconds=total_actual / n,
        ideal_step_seconds=total_ideal / n,
        slowdown=total_actual / total_ideal if total_ideal > 0 else 1.0,
        worst_rank=table.ranks[worst] if len(table.ranks) > 1 else None,
        worst_rank_share=share if len(table.ranks) > 1 else None,
        fixed_worst_step_seconds=total_fixed / n,
    )
