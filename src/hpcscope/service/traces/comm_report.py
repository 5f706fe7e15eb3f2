"""The per-class communication section of ``traces analyze --json`` (``comm_classes``, schema
``hpcscope.traces.comm-classes/1``, documented in ``docs/traces.md``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcscope.analysis.traces.comm_phases import ClassPhases, class_phases
from hpcscope.analysis.traces.comm_timeline import CommTimeline
from hpcscope.analysis.traces.kernel_classes import CLASS_LABELS, ClassTable
from hpcscope.analysis.traces.phases import PhaseTable
from hpcscope.analysis.traces.rank_timeline import RankTimeline
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
        for s, number in enumerate(table.steps):
            i = index[number]
            windows[r, s] = (tl.step_start_us[i], tl.step_end_us[i])
    return class_phases(comms, table.ranks, table.steps, windows, table.step_seconds)


def _r(value: float) -> float:
    return round(float(value), 6)


def comm_json(phases: ClassPhases | None) -> dict[str, Any] | None:
    """The ``comm_classes`` section (None when the ranks were not classified)."""
    if phases is None:
        return None
    p = phases
    ranks = [str(r) for r in p.ranks]
    exposed = p.exposed
    classes = []
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
    per_step = [
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
    unclassified = [{"rank": rank, "name": name, "seconds": _r(-neg)} for neg, rank, name in rows]
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
