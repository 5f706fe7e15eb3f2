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
size); ``reduced_sketch`` is the sketch of the averaged bucket it received back, reported by
the step's two witness ranks (``step mod n`` and ``step + 1 mod n``) and null on the others.
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
class BucketReport:
    """One gradient bucket as one rank saw it in one step.

    Attributes:
        index: DDP's bucket index.
        numel: elements in the bucket.
        norm: L2 norm of the local gradient the rank sent.
        nonfinite: NaN/Inf elements in it.
        sketch: count-sketch of the local gradient (``k`` floats).
        reduced_sketch: count-sketch of the averaged gradient the rank received (witness
            ranks only, else None).
    """

    index: int
    numel: int
    norm: float
    nonfinite: int
    sketch: FloatArray
    reduced_sketch: FloatArray | None


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

    def reduced_sketch(self) -> FloatArray | None:
        """The sketches of the averaged buckets, concatenated in bucket order (None when this
        rank was not a witness of the step)."""
        ordered = sorted(self.buckets, key=lambda b: b.index)
        parts = [b.reduced_sketch for b in ordered]
        if not parts or any(part is None for part in parts):
            return None
        return np.concatenate([p for p in parts if p is not None])
