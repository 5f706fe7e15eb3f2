"""Interval arithmetic on numpy arrays (half-open ``[start, end)``, microseconds).

Small, vectorised helpers the phase attribution is built from: merge overlapping intervals,
clip to a window, test which points an interval set covers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import distinct

F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Intervals:
    """Disjoint, sorted intervals (after :func:`merge`) or raw ones (before)."""

    start: F64
    end: F64

    @staticmethod
    def empty() -> Intervals:
        return Intervals(np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return int(self.start.shape[0])

    def total(self) -> float:
        return float(np.sum(self.end - self.start)) if len(self) else 0.0


def merge(start: F64, end: F64) -> Intervals:
    """Union of intervals: sorted, disjoint, empty intervals dropped."""
    keep = end > start
    start, end = start[keep], end[keep]
    if start.shape[0] == 0:
        return Intervals.empty()
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    running_end = np.maximum.accumulate(end)
    # a new group starts where an interval begins after everything before it has ended
    new_group = np.empty(start.shape[0], dtype=bool)
    new_group[0] = True
    new_group[1:] = start[1:] > running_end[:-1]
    group = np.cumsum(new_group) - 1
    starts = start[new_group]
    ends = np.zeros(starts.shape[0])
    np.maximum.at(ends, group, end)
    return Intervals(starts, ends)


def clip(intervals: Intervals, lo: float, hi: float) -> Intervals:
    """The part of (merged) ``intervals`` inside ``[lo, hi)``."""
    if not len(intervals):
        return intervals
    start = np.clip(intervals.start, lo, hi)
    end = np.clip(intervals.end, lo, hi)
    keep = end > start
    return Intervals(start[keep], end[keep])


def covers(intervals: Intervals, points: F64) -> BOOL:
    """Which ``points`` lie inside the (merged) ``intervals``."""
    if not len(intervals) or points.shape[0] == 0:
        return np.zeros(points.shape[0], dtype=bool)
    index = np.searchsorted(intervals.start, points, side="right") - 1
    inside = index >= 0
    safe = np.where(inside, index, 0)
    return inside & (intervals.end[safe] > points)


def hull(start: F64, end: F64) -> Intervals:
    """One interval from the first start to the last end (empty input -> empty)."""
    if start.shape[0] == 0:
        return Intervals.empty()
    return Intervals(np.array([float(start.min())]), np.array([float(end.max())]))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two merged interval sets."""
    if not len(a) or not len(b):
        return Intervals.empty()
    points = distinct(np.concatenate([a.start, a.end, b.start, b.end]))
    lo, hi = points[:-1], points[1:]
    mid = (lo + hi) / 2
    keep = covers(a, mid) & covers(b, mid)
    return merge(lo[keep], hi[keep])
