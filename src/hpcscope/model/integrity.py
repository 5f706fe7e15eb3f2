"""Gradient-integrity records: what the opt-in DDP hook writes per rank and step.

The hook (:mod:`hpcscope.integrity`) appends one JSON line per training step to
``<spool>/<job>/rank-<rank>.jsonl``; the collector parses them
(:mod:`hpcscope.ingest.integrity.records`) and evaluates rules GI-1 to GI-4
(:mod:`hpcscope.analysis.integrity`). One line::

    {"format": "hpcscope-integrity/1", "job_id": "4242", "node": "n001", "gpu": 3,
     "rank": 3, "world_size": 8, "step": 17, "ts": 1767225600.125, "sketch_dim": 128,
     "seed": 912873, "buckets": [{"index": 0, "numel": 103434, "norm": 0.8125,
     "nonfinite": 0, "sketch": [...k floats...], "reduced_sketch": [...k floats...]}],
     "param_checksum": "9f2c..." | null}

``sketch`` is the rank's count-sketch of the bucket it sent (before DDP divides by the world
size). What came back, the averaged bucket, is witnessed by two ranks per part: with three
ranks or more the bucket's sketch rows are cut into ``n`` slices (:func:`slice_bounds`) and
each rank reports the sketches of the two slices it witnesses at that step
(:func:`witnessed_slices`) as ``"reduced_slices": [{"slice": i, "of": n, "sketch": [...k
floats...]}, ...]``; the sketch is linear, so the slices' sketches sum to the bucket's, and
every rank does 2/n of one pass instead of two ranks doing a whole one (no rank is slower
than the others on its witness steps). With one or two ranks, or a bucket of fewer sketch
rows than ranks, the step's witnesses (``step mod n`` and ``step + 1 mod n``) report the
whole bucket as ``"reduced_sketch": [...k floats...]`` (null on the others), the form every
earlier hook wrote.
Everything in a line is **self-reported by the training process and untrusted**: the job,
node and GPU are re-derived at ingest, and the rules cross-check the numbers against each
other (GI-3, GI-4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FORMAT = "hpcscope-integrity/1"

#: Default sketch dimension per bucket.
DEFAULT_SKETCH_DIM = 128

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ReducedSlice:
    """A witness's count-sketch of one slice of the averaged bucket it received.

    Attributes:
        slice: which slice (0-based).
        of: slices the bucket is cut into (1: the whole bucket).
        sketch: the slice's count-sketch (``k`` floats).
    """

    slice: int
    of: int
    sketch: FloatArray


def slice_bounds(numel: int, k: int, slices: int, index: int) -> tuple[int, int]:
    """Element range ``[start, stop)`` of slice ``index`` of ``slices`` of a bucket of
    ``numel`` elements: whole sketch rows of ``k`` elements (so each slice's sketch aligns with
    the bucket's), the last slice taking the tail that fills no row."""
    rows = numel // k
    start = index * rows // slices * k
    stop = numel if index == slices - 1 else (index + 1) * rows // slices * k
    return start, stop


def witnessed_slices(rank: int, step: int, world_size: int, numel: int, k: int) -> tuple[int, ...]:
    """The slices of a bucket that ``rank`` witnesses at ``step``, as a tuple of slice
    indices, with the slice count first: ``(of, *slices)``.

    Three ranks or more and at least as many sketch rows as ranks: ``of = n`` slices, slice
    ``i`` witnessed by ranks ``i + step`` and ``i + step + 1`` (mod n), so every rank takes
    two. Otherwise ``of = 1``: the whole bucket, witnessed by ranks ``step`` and ``step + 1``
    (mod n).
    """
    if world_size >= 3 and numel // k >= world_size:
        first = (rank - step) % world_size
        return (world_size, (first - 1) % world_size, first)
    if (rank - step) % world_size < min(2, world_size):
        return (1, 0)
    return (1,)


@dataclass(frozen=True, slots=True)
class BucketReport:
    """One gradient bucket as one rank saw it in one step.

    Attributes:
        index: DDP's bucket index.
        numel: elements in the bucket.
        norm: L2 norm of the local gradient the rank sent.
        nonfinite: NaN/Inf elements in it.
        sketch: count-sketch of the local gradient (``k`` floats).
        reduced: count-sketches of the slices of the averaged gradient the rank received and
            witnessed (empty when it witnessed none; one slice ``0 of 1`` for a whole bucket).
    """

    index: int
    numel: int
    norm: float
    nonfinite: int
    sketch: FloatArray
    reduced: tuple[ReducedSlice, ...] = ()


@dataclass(frozen=True, slots=True)
class IntegrityRecord:
    """One rank's report for one step, as claimed by the training process.

    Attributes:
        job_id: the job the process says it belongs to (untrusted).
        node: the host it says it runs on (untrusted).
        gpu: the GPU index it says it uses (untrusted; None on CPU).
        rank: its data-parallel rank.
        world_size: ranks in the group.
        step: training step (0-based, counted by the hook).
        ts: wall-clock time of the report, epoch seconds.
        sketch_dim: ``k``.
        seed: the job's sketch seed.
        buckets: the step's gradient buckets, by index.
        param_checksum: digest of the replica's parameters every K steps, else None.
        source: the spool file, and ``line`` in it (for evidence links).
    """

    job_id: str
    node: str
    gpu: int | None
    rank: int
    world_size: int
    step: int
    ts: float
    sketch_dim: int
    seed: int
    buckets: tuple[BucketReport, ...]
    param_checksum: str | None
    source: str
    line: int

    def norm(self) -> float:
        """L2 norm of the whole local gradient (all buckets)."""
        return float(np.sqrt(sum(b.norm * b.norm for b in self.buckets)))

    def nonfinite(self) -> int:
        """NaN/Inf elements over all buckets."""
        return sum(b.nonfinite for b in self.buckets)

    def sketch(self) -> FloatArray:
        """The buckets' sketches concatenated in bucket order: a sketch of the whole gradient
        (buckets are disjoint, so this is still linear and inner products still add up)."""
        ordered = sorted(self.buckets, key=lambda b: b.index)
        return np.concatenate([b.sketch for b in ordered]) if ordered else np.zeros(0)
