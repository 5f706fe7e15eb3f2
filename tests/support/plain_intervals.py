"""Interval arithmetic in plain Python, for truths computed independently of hpcscope's own
(``hpcscope.analysis.traces.intervals``): the tests and benches that check an analysis against
a trace's raw intervals use these, never the code under test."""

from __future__ import annotations

Interval = tuple[float, float]


def union(spans: list[Interval]) -> list[Interval]:
    """The spans merged, in order (empty spans dropped)."""
    out: list[Interval] = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def length(spans: list[Interval]) -> float:
    """Total length of merged spans."""
    return sum(hi - lo for lo, hi in spans)


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of ``a ∩ b``, both merged."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
