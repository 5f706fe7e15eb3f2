"""What the gradient-integrity hook of a twin training job writes: ``rank-<r>.jsonl`` lines.

The real hook (:mod:`hpcscope.integrity`) sketches each bucket a rank sends with a count
sketch; any linear sketch satisfies what the rules check, so the twin uses a seeded Gaussian
projection (numpy, no torch). :func:`step_lines` is one step of a data-parallel job: every rank
sends its gradient and reports its sketch, two ranks per slice witness the averaged bucket
(:func:`~hpcscope.model.integrity.witnessed_slices`); ``injected`` ranks send a poisoned
gradient but report the sketch of an honest one, as a rank pushing poisoned gradients while
hiding it would: the reported sketches no longer add up to the reduced one (GI-3).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from hpcscope.model.integrity import FORMAT, slice_bounds, witnessed_slices

SKETCH_DIM = 16
NUMEL = 256
SEED = 7

Floats = npt.NDArray[np.float64]


def _projection() -> Floats:
    matrix: Floats = np.random.default_rng(SEED).standard_normal((SKETCH_DIM, NUMEL))
    scaled: Floats = matrix / np.sqrt(SKETCH_DIM)
    return scaled


_S = _projection()


def step_lines(
    *,
    job_id: str,
    placement: Sequence[tuple[str, int]],
    step: int,
    ts: float,
    seed: int,
    injected: Mapping[int, float] | None = None,
) -> list[str]:
    """One JSON line per rank for ``step`` of a job whose rank ``r`` runs on ``placement[r]``
    (node, GPU). ``injected``: rank -> scale of the poisoned gradient it sends."""
    world = len(placement)
    rng = np.random.default_rng([seed, step])
    shared = rng.standard_normal(NUMEL)
    honest = np.stack([3.0 * shared + rng.standard_normal(NUMEL) for _ in range(world)])
    sent = honest.copy()
    for rank, scale in (injected or {}).items():
        sent[rank] = -scale * shared + rng.standard_normal(NUMEL)
    average = sent.mean(axis=0)
    lines = []
    for rank, (node, gpu) in enumerate(placement):
        reported = honest[rank]  # what every rank claims to have sent
        of, *slices = witnessed_slices(rank, step, world, NUMEL, SKETCH_DIM)
        parts = []
        for index in slices:
            start, stop = slice_bounds(NUMEL, SKETCH_DIM, of, index)
            sketch = _S[:, start:stop] @ average[start:stop]
            parts.append({"slice": index, "of": of, "sketch": sketch.tolist()})
        line = {
            "format": FORMAT,
            "job_id": job_id,
            "node": node,
            "gpu": gpu,
            "rank": rank,
            "world_size": world,
            "step": step,
            "ts": ts,
            "sketch_dim": SKETCH_DIM,
            "seed": SEED,
            "buckets": [
                {
                    "index": 0,
                    "numel": NUMEL,
                    "norm": float(np.linalg.norm(reported)),
                    "nonfinite": 0,
                    "sketch": (_S @ reported).tolist(),
                    "reduced_slices": parts,
                }
            ],
            "param_checksum": f"{seed:08x}{step:08x}",
        }
        lines.append(json.dumps(line, separators=(",", ":")))
    return lines
