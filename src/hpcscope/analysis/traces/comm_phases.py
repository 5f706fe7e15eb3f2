"""Communication per class, per rank and step: time, the part hidden under compute, the
exposed part, the pipeline bubble, the What-if gain of each class, and the ranks the others
wait for in a class.

Input: each rank's :class:`~hpcscope.analysis.traces.comm_timeline.CommTimeline` and the
step windows of the phase table. For a class ``c``, a rank and a step window ``W``:

* ``seconds`` = |C_c ∩ W|, the union of the class's transfers (overlapping transfers count
  once);
* ``hidden`` = |C_c ∩ K ∩ W| with ``K`` the compute that can hide a transfer (other streams,
  other threads); ``exposed`` = ``seconds - hidden``;
* ``bubble`` (pipeline only) = |B ∩ W \\ K|, the exposed part of pipeline receives: the rank
  idles waiting for another stage.

**What-if gain** of a class: the mean step time (each step takes its slowest rank) minus the
same with every rank's exposed time of that class removed from its step.

**Who the others wait for.** A collective ends together on every rank, so a rank that arrives
late waits least and makes the others' time in it longer: in each class, the rank whose median
time per step (over the steps) is lowest, when the median of the others' exceeds it by more than
:data:`STRAGGLER_SHARE` of that median and :data:`STRAGGLER_MIN_SECONDS`, is named ("rank 5
slow in expert all-to-all"), with that difference as the others' wait per step. In the
pipeline class the figure compared is the bubble: a stage's sends also last until the next
stage receives, so only the receives say which stage the others wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import median as median_of
from hpcscope.analysis.traces.comm_timeline import CommTimeline
from hpcscope.analysis.traces.intervals import Intervals, clip, intersect
from hpcscope.analysis.traces.kernel_classes import CLASS_LABELS, COMM_CLASSES

F64 = npt.NDArray[np.float64]

#: A class straggler: the others' time exceeds its own by this share of theirs ...
STRAGGLER_SHARE = 0.25
#: ... and by at least this many seconds per step.
STRAGGLER_MIN_SECONDS = 1e-3


@dataclass(frozen=True, slots=True)
class ClassStraggler:
    """A rank the others wait for in one class."""

    rank: int
    klass: str
    wait_seconds_per_step: float

    @property
    def message(self) -> str:
        return f"rank {self.rank} slow in {CLASS_LABELS[self.klass]}"


@dataclass(frozen=True, slots=True)
class ClassPhases:
    """Per-class communication for ``ranks`` x ``steps``.

    Attributes:
        classes: the communication classes found on any rank, in report order.
        seconds / hidden: arrays ``[rank, step, class]`` (exposed = seconds - hidden).
        bubble: ``[rank, step]`` pipeline bubble seconds.
        compute: ``[rank, step]`` seconds of compute that can hide a transfer.
        what_if_gain_seconds: class -> mean step seconds saved without its exposed time.
        actual_step_seconds: mean over steps of the slowest rank's step.
        stragglers: ranks the others wait for, by class.
        unclassified: rank -> event name -> seconds, of events no rule classifies.
    """

    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    classes: tuple[str, ...]
    seconds: F64
    hidden: F64
    bubble: F64
    compute: F64
    what_if_gain_seconds: dict[str, float]
    actual_step_seconds: float
    stragglers: tuple[ClassStraggler, ...]
    unclassified: dict[int, dict[str, float]]

    @property
    def exposed(self) -> F64:
        out: F64 = self.seconds - self.hidden
        return out


def _within(iv: Intervals, lo: float, hi: float) -> float:
    return clip(iv, lo, hi).total() / 1e6


def class_phases(
    comms: Sequence[CommTimeline],
    ranks: Sequence[int],
    steps: Sequence[int],
    windows: F64,
    step_seconds: F64,
) -> ClassPhases:
    """Per-class figures (see the module docstring).

    Args:
        comms: one per rank, aligned with ``ranks``.
        steps: the step numbers analysed.
        windows: ``[rank, step, 2]`` start and end (µs) of each rank's step window.
        step_seconds: ``[rank, step]`` step durations.
    """
    present = {k for c in comms for k, iv in c.classes.items() if len(iv)}
    classes = tuple(k for k in COMM_CLASSES if k in present)
    n_r, n_s, n_c = len(ranks), len(steps), len(classes)
    seconds = np.zeros((n_r, n_s, n_c))
    hidden = np.zeros((n_r, n_s, n_c))
    bubble = np.zeros((n_r, n_s))
    compute = np.zeros((n_r, n_s))
    for r, comm in enumerate(comms):
        for s in range(n_s):
            lo, hi = float(windows[r, s, 0]), float(windows[r, s, 1])
            busy = clip(comm.compute, lo, hi)
            compute[r, s] = busy.total() / 1e6
            for c, klass in enumerate(classes):
                part = clip(comm.classes.get(klass, Intervals.empty()), lo, hi)
                seconds[r, s, c] = part.total() / 1e6
                hidden[r, s, c] = intersect(part, busy).total() / 1e6
            recv = clip(comm.bubble, lo, hi)
            bubble[r, s] = (recv.total() - intersect(recv, busy).total()) / 1e6
    actual = float(step_seconds.max(axis=0).mean()) if n_r and n_s else 0.0
    gains: dict[str, float] = {}
    stragglers: list[ClassStraggler] = []
    exposed = seconds - hidden
    for c, klass in enumerate(classes):
        ideal = float((step_seconds - exposed[:, :, c]).max(axis=0).mean()) if n_s else 0.0
        gains[klass] = actual - ideal
        if n_r < 2 or not n_s:
            continue
        # the median over steps: one step a busy machine stretched does not decide
        typical = median_of(bubble if klass == "pp_send_recv" else seconds[:, :, c], axis=1)
        low = int(np.argmin(typical))
        others = float(median_of(np.delete(typical, low)))
        wait = others - float(typical[low])
        if wait > STRAGGLER_SHARE * others and wait > STRAGGLER_MIN_SECONDS:
            stragglers.append(ClassStraggler(int(ranks[low]), klass, wait))
    return ClassPhases(
        ranks=tuple(ranks),
        steps=tuple(steps),
        classes=classes,
        seconds=seconds,
        hidden=hidden,
        bubble=bubble,
        compute=compute,
        what_if_gain_seconds=gains,
        actual_step_seconds=actual,
        stragglers=tuple(stragglers),
        unclassified={
            int(rank): dict(comm.unclassified)
            for rank, comm in zip(ranks, comms, strict=True)
            if comm.unclassified
        },
    )
