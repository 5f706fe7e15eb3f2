"""The per-class communication section of ``traces analyze --json`` (``comm_classes``, schema
``hpcscope.traces.comm-classes/1``, documented in ``docs/traces.md``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from hpcscope.analysis.traces.comm_phases import ClassPhases, class_phases
from hpcscope.analysis.traces.comm_timeline import CommTimeline
from hpcscope.analysis.traces.kernel_classes import CLASS_LABELS, ClassTable
from hpcscope.analysis.traces.phases import PhaseTable
from hpcscope.analysis.traces.rank_timeline import RankTimeline
from hpcscope.service.traces.document import (
    CommClassesJson,
    CommClassJson,
    CommStepJson,
    UnclassifiedJson,
)
from hpcscope.service.traces.kernel_classes import load_class_table

COMM_SCHEMA = "hpcscope.traces.comm-classes/1"


@functools.lru_cache(maxsize=1)
def bundled_table() -> ClassTable:
    """The shipped class table, loaded once per process."""
    return load_class_table()


def comm_phases(timelines: Sequence[RankTimeline], table: PhaseTable) -> ClassPhases | None:
    """Per-class figures over the table's steps; None unless every rank was classified."""
    by_rank = {tl.rank: tl for tl in timelines}
    comms: list[CommTimeline] = []
    windows = np.zeros((len(table.ranks), len(table.steps), 2))
    for r, rank in enumerate(table.ranks):
        tl = by_rank[rank]
        if tl.comm is None:
            return None
        comms.append(tl.comm)
        index = {number: i for i, number in enumerate(tl.steps)}
        gpu = tl.comm.step_windows_us
        for s, number in enumerate(table.steps):
            i = index[number]
            if gpu is not None and gpu.shape[0] == len(tl.steps):
                windows[r, s] = gpu[i]  # a GPU rank: the step's work on the GPU
            else:
                windows[r, s] = (tl.step_start_us[i], tl.step_end_us[i])
    return class_phases(comms, table.ranks, table.steps, windows, table.step_seconds)


def class_notes(phases: ClassPhases | None, communication_seconds: float) -> list[str]:
    """Notes for the document when the classes find communication the phase columns do not
    show (their ``communication`` and ``barrier_wait`` split the collectives the training
    loop waits for, such as DDP's all-reduce; an expert all-to-all run by its own kernels,
    hidden under compute, is not one): per class, its time, hidden share and exposed time, so
    that "communication 0 %" is never the whole answer. ``communication_seconds``: the phase
    table's mean communication plus barrier wait per rank and step; no note when it is at
    least a tenth of the classes' time."""
    if phases is None or not phases.classes:
        return []
    p = phases
    per_class = p.seconds.mean(axis=(0, 1))
    if communication_seconds >= 0.1 * float(per_class.sum()):
        return []
    exposed = p.exposed.mean(axis=(0, 1))
    hidden = p.hidden.sum(axis=(0, 1))
    total = p.seconds.sum(axis=(0, 1))
    parts = []
    for c, klass in enumerate(p.classes):
        if per_class[c] <= 0:
            continue
        share = float(hidden[c] / total[c]) if total[c] else 0.0
        parts.append(
            f"{CLASS_LABELS[klass]} {per_class[c] * 1e3:.1f} ms per step "
            f"({share:.0%} hidden under compute, {exposed[c] * 1e3:.1f} ms exposed)"
        )
    if not parts:
        return []
    return [
        "The phase columns' communication and barrier wait "
        f"({communication_seconds * 1e3:.1f} ms per step) count the collectives the training "
        "loop waits for; the kernel classes find more: "
        + "; ".join(parts)
        + "; see communication by class."
    ]


def _r(value: float) -> float:
    return round(float(value), 6)


def comm_json(phases: ClassPhases | None) -> CommClassesJson | None:
    """The ``comm_classes`` section (None when the ranks were not classified)."""
    if phases is None:
        return None
    p = phases
    ranks = [str(r) for r in p.ranks]
    exposed = p.exposed
    classes: list[CommClassJson] = []
    for c, klass in enumerate(p.classes):
        total = float(p.seconds[:, :, c].sum())
        classes.append(
            {
                "class": klass,
                "label": CLASS_LABELS[klass],
                "seconds_per_step": {k: _r(p.seconds[r, :, c].mean()) for r, k in enumerate(ranks)},
                "hidden_seconds_per_step": {
                    k: _r(p.hidden[r, :, c].mean()) for r, k in enumerate(ranks)
                },
                "exposed_seconds_per_step": {
                    k: _r(exposed[r, :, c].mean()) for r, k in enumerate(ranks)
                },
                "hidden_ratio": _r(float(p.hidden[:, :, c].sum()) / total) if total else None,
                "what_if_gain_seconds": _r(p.what_if_gain_seconds[klass]),
                "what_if_gain_ratio": _r(p.what_if_gain_seconds[klass] / p.actual_step_seconds)
                if p.actual_step_seconds
                else None,
            }
        )
    per_step: list[CommStepJson] = [
        {
            "step": step,
            "ranks": {
                k: {
                    "compute_seconds": _r(p.compute[r, s]),
                    "bubble_seconds": _r(p.bubble[r, s]),
                    "classes": {
                        klass: {
                            "seconds": _r(p.seconds[r, s, c]),
                            "hidden_seconds": _r(p.hidden[r, s, c]),
                            "exposed_seconds": _r(exposed[r, s, c]),
                        }
                        for c, klass in enumerate(p.classes)
                    },
                }
                for r, k in enumerate(ranks)
            },
        }
        for s, step in enumerate(p.steps)
    ]
    rows = sorted(
        (-seconds, rank, name)
        for rank, names in p.unclassified.items()
        for name, seconds in names.items()
    )
    unclassified: list[UnclassifiedJson] = [
        {"rank": rank, "name": name, "seconds": _r(-neg)} for neg, rank, name in rows
    ]
    unclassified_seconds = -sum(neg for neg, _, _ in rows)
    return {
        "schema": COMM_SCHEMA,
        "classes": classes,
        "bubble_seconds_per_step": {k: _r(p.bubble[r].mean()) for r, k in enumerate(ranks)},
        "per_step": per_step,
        "stragglers": [
            {
                "rank": s.rank,
                "class": s.klass,
                "message": s.message,
                "wait_seconds_per_step": _r(s.wait_seconds_per_step),
            }
            for s in p.stragglers
        ],
        "unclassified": unclassified,
        "unclassified_seconds": _r(unclassified_seconds),
    }
