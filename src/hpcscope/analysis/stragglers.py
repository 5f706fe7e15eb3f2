"""Stragglers from a phase table: who, in which phase, and what fixing them would give.

Definitions (all per rank and step, from :class:`~hpcscope.analysis.phases.PhaseTable`):

* **busy** = step duration - barrier wait: how long the step would take the rank if it never
  waited for a peer. In synchronous training every rank's step lasts as long as the slowest
  rank's busy time, so busy time, not step time, tells ranks apart.
* **slowest rank of a step** = largest busy; its **excess** = its busy - the median busy of
  the other ranks.
* **score** (NVRx relative score, ``nvidia_resiliency_ext.attribution.straggler``) = the
  smallest per-rank median busy / this rank's median busy: 1 = as fast as the fastest rank,
  0.5 = twice as slow. A rank is a straggler when its score is below ``threshold``
  (NVRx's default 0.75) and its median excess is at least ``min_excess_ratio`` of the step.
* **phase that makes it slow** = the phase (barrier wait aside) whose median seconds exceed the
  peers' median by the most.
* **What-if** (OSDI'25, "Understanding Stragglers in Large Model Training Using What-if
  Analysis", for data parallelism): the ideal step is the step every rank would run at the
  peer median: the median over ranks of busy time (the median rank's phases, barrier wait
  excluded). Summing per-phase medians instead mixes phases of different ranks and, on
  measured runs, drifts from the counterfactual by 10-60 % (a rank that waits less also
  transfers in less time), so the per-phase medians serve only to name the phase.
  ``slowdown = actual / ideal`` over all steps, with ``actual`` the mean step duration of the
  ranks; ``worst_rank_share`` = share of ``actual - ideal`` removed by giving only the worst
  rank the ideal busy time, the others keeping theirs (the step then lasts as long as the
  largest remaining busy time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.phases import PhaseTable
from hpcscope.analysis.rank_timeline import PHASES

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
    """A rank slower than its peers over the run."""

    rank: int
    phase: str
    excess_seconds_per_step: float
    score: float
    phase_excess_seconds_per_step: dict[str, float] = field(default_factory=dict)
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


def _hint(phase: str) -> str:
    return {
        "data_load": "data: the input pipeline of this rank is slow (DataLoader workers, "
        "storage reads, preprocessing)",
        "forward": "compute: this rank computes more slowly (GPU clocks throttled, thermal, "
        "a faulty GPU) or has more work (uneven batch or sequence lengths)",
        "backward": "compute: this rank computes more slowly (GPU clocks throttled, thermal, "
        "a faulty GPU) or has more work (uneven batch or sequence lengths)",
        "optimizer": "compute: the optimizer step is slower on this rank (uneven parameter "
        "sharding, CPU offload, throttled GPU)",
        "communication": "network: this rank's collectives transfer more slowly (link, NIC, "
        "InfiniBand errors, topology)",
        "other": "software: time outside the recognised phases (GC pauses, CPU launch gaps, "
        "logging, checkpointing, Python overhead)",
    }[phase]


def straggler_report(
    table: PhaseTable, *, threshold: float = 0.75, min_excess_ratio: float = 0.02
) -> StragglerReport:
    """Slowest rank per step, per-rank scores, stragglers with their phase, and what-if.

    Args:
        table: phase seconds ``[rank, step, phase]``.
        threshold: score below which a rank is a straggler (NVRx default 0.75).
        min_excess_ratio: a straggler's median excess must also be at least this share of the
            median step (guards against flagging noise on very short steps).

    Returns:
        The report; ``stragglers`` is empty when there is none.
    """
    ranks = table.ranks
    n_ranks, n_steps = table.step_seconds.shape
    if n_ranks == 0 or n_steps == 0:
        empty = WhatIf(0.0, 0.0, 1.0, None, None, 0.0)
        return StragglerReport((), {}, {}, (), empty, threshold)
    wait = table.phase("barrier_wait")
    busy = table.step_seconds - wait  # [rank, step]
    per_step: list[StepStraggler] = []
    for s, step in enumerate(table.steps):
        r = int(np.argmax(busy[:, s]))
        peers = np.delete(busy[:, s], r)
        excess = float(busy[r, s] - np.median(peers)) if peers.size else 0.0
        per_step.append(
            StepStraggler(
                step, ranks[r], float(busy[r, s]), excess, float(table.step_seconds[r, s])
            )
        )
    busy_median = np.median(busy, axis=1)
    reference = float(busy_median.min())
    scores = np.where(busy_median > 0, reference / np.where(busy_median > 0, busy_median, 1), 1.0)
    phase_median = np.median(table.seconds, axis=1)  # [rank, phase]
    median_step = float(np.median(table.step_seconds))
    stragglers: list[Straggler] = []
    for r in range(n_ranks):
        peers = np.delete(np.arange(n_ranks), r)
        if not peers.size:
            break
        excess = float(busy_median[r] - np.median(busy_median[peers]))
        if scores[r] >= threshold or excess < min_excess_ratio * median_step:
            continue
        phase_excess = {
            name: float(phase_median[r, i] - np.median(phase_median[peers, i]))
            for i, name in enumerate(PHASES)
            if name in CAUSE_PHASES
        }
        phase = max(phase_excess, key=lambda k: phase_excess[k])
        stragglers.append(
            Straggler(
                rank=ranks[r],
                phase=phase,
                excess_seconds_per_step=excess,
                score=float(scores[r]),
                phase_excess_seconds_per_step=phase_excess,
                hint=_hint(phase),
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
        busy: ``[rank, step]`` step seconds minus barrier wait.
        worst: row of the rank to fix alone (the one with the largest median busy).
    """
    ideal = np.median(busy, axis=0)  # [step]
    actual = table.step_seconds.mean(axis=0)  # [step]
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
