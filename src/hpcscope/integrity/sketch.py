"""A linear count-sketch of gradient buckets, with a seed shared by the job.

``sketch(x)[m] = sum over positions j with j mod k = m of s_j * x_j``, with Rademacher signs
``s_j`` drawn from (job seed, bucket index, bucket size). It is linear, so the sketch of the
sum of the ranks' gradients is the sum of their sketches (what GI-3 checks), and it preserves
inner products in expectation, ``E[<S a, S b>] = <a, b>`` (the signs cancel the cross terms),
with a variance that falls as ``1/k``: a count-sketch (Charikar, Chen, Farach-Colton 2002),
the sparse relative of a Johnson-Lindenstrauss projection, so cosines between ranks survive
the projection approximately. The hash is the position modulo ``k`` instead of a random one:
no index gather, O(d) work as one multiply and one reshape-sum, never a k x d matrix. The
price: when a gradient's mass sits in a few positions the estimate is noisier than with a
random hash.

Memory: one sign per parameter and one scratch buffer, cached per bucket (8 bytes per
parameter in the gradient's dtype; the scratch buffer spares a fresh allocation, and its page
faults, every step). That is fine for the models of the tests and the bench; for
multi-billion-parameter models regenerate the signs per step in chunks instead (not
shipped).
"""

from __future__ import annotations

import hashlib
from typing import Any


def job_seed(job_id: str) -> int:
    """The sketch seed every rank of ``job_id`` derives without talking to the others."""
    digest = hashlib.blake2b(f"hpcscope-integrity:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 62) - 1)


def _bucket_seed(seed: int, index: int, numel: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{index}:{numel}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 62) - 1)


class CountSketch:
    """Sketches flattened buckets into ``k`` floats.

    Args:
        seed: the job's seed (:func:`job_seed`); every rank must use the same one.
        k: sketch dimension per bucket.
    """

    def __init__(self, seed: int, k: int) -> None:
        if k < 1:
            raise ValueError(f"sketch dimension must be positive, not {k}")
        self.seed = seed
        self.k = k
        self._signs: dict[tuple[int, int, str, str], tuple[Any, Any]] = {}

    def signs(self, index: int, flat: Any) -> Any:
        """The Rademacher signs of bucket ``index`` (cached), on ``flat``'s device and dtype."""
        return self._cached(index, flat)[0]

    def _cached(self, index: int, flat: Any) -> tuple[Any, Any]:
        import torch

        key = (index, int(flat.numel()), str(flat.device), str(flat.dtype))
        cached = self._signs.get(key)
        if cached is None:
            generator = torch.Generator().manual_seed(_bucket_seed(self.seed, index, key[1]))
            bits = torch.randint(0, 2, (key[1],), generator=generator, dtype=torch.int8)
            signs = (bits * 2 - 1).to(device=flat.device, dtype=flat.dtype)
            cached = self._signs[key] = (signs, torch.empty_like(signs))
        return cached

    def __call__(self, index: int, flat: Any) -> Any:
        """The sketch of a flat tensor (same dtype and device, ``k`` elements)."""
        return self.part(index, flat, 0, int(flat.numel()))

    def part(self, index: int, flat: Any, start: int, stop: int) -> Any:
        """The sketch of elements ``[start, stop)`` of bucket ``index`` (``start`` a multiple
        of ``k``): the bucket's sketch is the sum of its parts' over any cut into such ranges.
        """
        import torch

        k = self.k
        if start % k:
            raise ValueError(f"a part starts on a sketch row: {start} is not a multiple of {k}")
        signs, scratch = self._cached(index, flat)
        signed = torch.mul(flat[start:stop], signs[start:stop], out=scratch[start:stop])
        rows = signed.numel() // k
        out = signed[: rows * k].view(rows, k).sum(0) if rows else signed.new_zeros(k)
        tail = signed[rows * k :]
        if tail.numel():
            out[: tail.numel()] += tail
        return out
