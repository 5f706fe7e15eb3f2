"""Integrity records fabricated with numpy (no torch): for parser, signal and spool tests.

:func:`step_lines` writes what honest ranks (and optionally a lying one) would report for one
step: per rank a gradient, its norm and a linear sketch (a seeded Gaussian projection: any
linear sketch satisfies what the analysis checks), and the sketch of the average on the two
witness ranks (``sliced=True``: of the two slices each rank witnesses, as the hook writes it
with three ranks or more; the projection of a slice is its columns').
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from hpcscope.model.integrity import FORMAT, slice_bounds, witnessed_slices

K = 16
D = 200


def projection(seed: int = 7) -> np.ndarray:
    matrix: np.ndarray = np.random.default_rng(seed).standard_normal((K, D)) / np.sqrt(K)
    return matrix


def gradients(world: int, *, seed: int, alignment: float = 3.0) -> np.ndarray:
    """``world`` gradients sharing a direction (cosines ~0.9) plus per-rank noise."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(D)
    return np.stack([alignment * shared + rng.standard_normal(D) for _ in range(world)])


def record(
    *,
    rank: int,
    world: int,
    step: int,
    sent: np.ndarray,
    reported: np.ndarray,
    average: np.ndarray,
    job_id: str = "4242",
    node: str | None = None,
    gpu: int | None = None,
    checksum: str | None = "same",
    ts: float = 1_767_225_600.0,
    sliced: bool = False,
    witnessed: np.ndarray | None = None,
) -> dict[str, object]:
    """One rank's line: ``reported`` is what it claims to have sent (``sent`` is unused
    except by honest callers who pass the same array); ``witnessed`` what it claims to have
    received (default: the true ``average``)."""
    s = projection()
    received = average if witnessed is None else witnessed
    reduced: dict[str, object]
    if sliced:
        of, *slices = witnessed_slices(rank, step, world, D, K)
        parts = []
        for index in slices:
            start, stop = slice_bounds(D, K, of, index)
            sketch = s[:, start:stop] @ received[start:stop]
            parts.append({"slice": index, "of": of, "sketch": sketch.tolist()})
        reduced = {"reduced_slices": parts}
    else:
        witness = (rank - step) % world < 2
        reduced = {"reduced_sketch": (s @ received).tolist() if witness else None}
    return {
        "format": FORMAT,
        "job_id": job_id,
        "node": node or f"node{rank // 2}",
        "gpu": rank % 2 if gpu is None else gpu,
        "rank": rank,
        "world_size": world,
        "step": step,
        "ts": ts + step,
        "sketch_dim": K,
        "seed": 7,
        "buckets": [
            {
                "index": 0,
                "numel": D,
                "norm": float(np.linalg.norm(reported)),
                "nonfinite": int((~np.isfinite(reported)).sum()),
                "sketch": (s @ reported).tolist(),
                **reduced,
            }
        ],
        "param_checksum": checksum,
    }


def step_lines(
    grads: np.ndarray,
    *,
    step: int,
    lie: dict[int, np.ndarray] | None = None,
    witness_lie: dict[int, np.ndarray] | None = None,
    **kwargs: object,
) -> list[str]:
    """One JSON line per rank: rank i sends ``grads[i]`` and reports ``lie[i]`` if given, and
    claims to have received ``witness_lie[i]`` if given."""
    world = grads.shape[0]
    average = grads.mean(axis=0)
    lines = []
    for rank in range(world):
        reported = (lie or {}).get(rank, grads[rank])
        lines.append(
            json.dumps(
                record(
                    rank=rank, world=world, step=step, sent=grads[rank], reported=reported,
                    average=average, witnessed=(witness_lie or {}).get(rank),
                    **kwargs,  # type: ignore[arg-type]
                )
            )
        )  # fmt: skip
    return lines


def lines_by_rank(steps: Sequence[list[str]]) -> dict[int, list[str]]:
    """Regroup per-step lines into per-rank files."""
    out: dict[int, list[str]] = {}
    for lines in steps:
        for rank, line in enumerate(lines):
            out.setdefault(rank, []).append(line)
    return out
