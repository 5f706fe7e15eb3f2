"""A step window's phase seconds: the faster labelling (only the intervals that meet the
window clipped, only the unclaimed instants tested) gives the same bits as the plain one."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import example, given
from hypothesis import strategies as st

from hpcscope.analysis.traces.arrays import distinct
from hpcscope.analysis.traces.intervals import Intervals, clip, merge
from hpcscope.analysis.traces.phases import _clip_to, _label, _ordered
from hpcscope.analysis.traces.rank_timeline import PHASES


def _plain_label(
    window: tuple[float, float], sources: list[tuple[int, Intervals]]
) -> npt.NDArray[np.float64]:
    """The labelling as first written: every source clipped whole, every instant tested."""
    lo, hi = window
    out = np.zeros(len(PHASES))
    if hi <= lo:
        return out
    clipped = [(phase, clip(iv, lo, hi)) for phase, iv in sources]
    points = [np.array([lo, hi])]
    points += [iv.start for _, iv in clipped] + [iv.end for _, iv in clipped]
    edges = distinct(np.concatenate(points))
    length = np.diff(edges)
    mid = (edges[:-1] + edges[1:]) / 2
    label = np.full(mid.shape[0], PHASES.index("other"), dtype=np.int64)
    free = np.ones(mid.shape[0], dtype=bool)
    for phase, iv in clipped:
        if not len(iv) or not free.any():
            continue
        index = np.searchsorted(iv.start, mid, side="right") - 1
        inside = (index >= 0) & (iv.end[np.clip(index, 0, None)] > mid) & free
        label[inside] = phase
        free &= ~inside
    np.add.at(out, label, length)
    return out / 1e6


_TIMES = st.floats(0, 1000, allow_nan=False, width=32)
_RAW = st.lists(st.tuples(_TIMES, _TIMES), max_size=12).map(
    lambda pairs: Intervals(
        np.array([min(a, b) for a, b in pairs], dtype=np.float64),
        np.array([max(a, b) for a, b in pairs], dtype=np.float64),
    )
)
#: merged sets (as the timelines hold) and raw ones, which take the plain path
_SETS = st.one_of(_RAW.map(lambda iv: merge(iv.start, iv.end)), _RAW)


@given(iv=_SETS, lo=_TIMES, hi=_TIMES)
def test_clip_to_is_clip(iv: Intervals, lo: float, hi: float) -> None:
    ours = _clip_to(iv, _ordered(iv), lo, hi)
    theirs = clip(iv, lo, hi)
    assert ours.start.tolist() == theirs.start.tolist()
    assert ours.end.tolist() == theirs.end.tolist()


@given(
    sources=st.lists(st.tuples(st.integers(0, len(PHASES) - 1), _SETS), max_size=8),
    lo=_TIMES,
    hi=_TIMES,
)
@example(  # an unsorted set: a binary search there answers by the queries before it
    sources=[
        (0, Intervals(np.array([0.0]), np.array([1.0]))),
        (0, Intervals(np.array([0.0, 2.0, 0.0]), np.array([2.0, 3.0, 1.0]))),
    ],
    lo=0.0,
    hi=3.0,
)
def test_label_is_the_plain_labelling(
    sources: list[tuple[int, Intervals]], lo: float, hi: float
) -> None:
    flagged = [(phase, iv, _ordered(iv)) for phase, iv in sources]
    assert _label((lo, hi), flagged).tolist() == _plain_label((lo, hi), sources).tolist()
