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

On the CPU the pass over a bucket before it is sent runs chunk by chunk
(:data:`CHUNK_ELEMENTS`, :meth:`CountSketch.host_measure`) on NumPy views of the tensor's
memory: ``einsum("ij,ij->j")`` multiplies a chunk by its signs and sums its rows in one loop,
then the chunk's sum of squares and the division by the world size before the AllReduce happen
while it is still in cache, so the bucket is read from memory once instead of three times. A
witness's part (:meth:`CountSketch.host_part`) is one ``einsum`` over its range. PyTorch's ops
do the same on a GPU (a few kernels over the whole range) and for dtypes NumPy lacks
(bfloat16), with a multiply into a per-thread scratch buffer and a row sum.

Memory: one sign per parameter, cached per bucket, in the gradient's dtype (4 bytes per
parameter in float32), and one scratch buffer per thread (a chunk, or the largest part or
bucket passed whole). That is fine for the models of the tests and the bench; for
multi-billion-parameter models regenerate the signs per step in chunks instead (not
shipped).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any


def job_seed(job_id: str) -> int:
    """The sketch seed every rank of ``job_id`` derives without talking to the others."""
    digest = hashlib.blake2b(f"hpcscope-integrity:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 62) - 1)


def _bucket_seed(seed: int, index: int, numel: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{index}:{numel}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 62) - 1)


#: Elements per chunk of a CPU pass: 64 Ki float32 are 256 KiB each for the gradient's chunk,
#: its signs and their product, which fit a core's L2 cache together. On the bench's buckets
#: (1.3 M float32) with cold caches, 64 Ki took 2.7 ms per pass here against 2.9-3.5 ms for
#: 128 Ki-4 Mi (the cache spilled) and 3.2 ms for 32 Ki (more Python per element).
CHUNK_ELEMENTS = 1 << 16


class CountSketch:
    """Sketches flattened buckets into ``k`` floats.

    Args:
        seed: the job's seed (:func:`job_seed`); every rank must use the same one.
        k: sketch dimension per bucket.
        chunk_elements: elements per chunk of a CPU pass (rounded down to whole sketch rows).
    """

    def __init__(self, seed: int, k: int, chunk_elements: int = CHUNK_ELEMENTS) -> None:
        if k < 1:
            raise ValueError(f"sketch dimension must be positive, not {k}")
        self.seed = seed
        self.k = k
        self.chunk = k * max(1, chunk_elements // k)
        self._signs: dict[tuple[int, int, str, str], Any] = {}
        self._scratch: dict[tuple[int, str, str], Any] = {}
        self._host: dict[tuple[int, int, Any], Any] = {}  # NumPy views of the CPU signs

    def signs(self, index: int, flat: Any) -> Any:
        """The Rademacher signs of bucket ``index`` (cached), on ``flat``'s device and dtype."""
        import torch

        key = (index, int(flat.numel()), str(flat.device), str(flat.dtype))
        signs = self._signs.get(key)
        if signs is None:
            generator = torch.Generator().manual_seed(_bucket_seed(self.seed, index, key[1]))
            bits = torch.randint(0, 2, (key[1],), generator=generator, dtype=torch.int8)
            signs = self._signs[key] = (bits * 2 - 1).to(device=flat.device, dtype=flat.dtype)
        return signs

    def _buffer(self, flat: Any, numel: int) -> Any:
        """A scratch buffer of at least ``numel`` elements, one per thread (the witness pass
        runs in the AllReduce's callback thread while the next bucket's pass runs in the
        backward's; torch releases the GIL inside each op), cached: a fresh one would cost an
        allocation, and its page faults, every pass."""
        import torch

        key = (threading.get_ident(), str(flat.device), str(flat.dtype))
        buffer = self._scratch.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = self._scratch[key] = torch.empty(numel, device=flat.device, dtype=flat.dtype)
        return buffer

    def __call__(self, index: int, flat: Any) -> Any:
        """The sketch of a flat tensor (same dtype and device, ``k`` elements)."""
        return self.part(index, flat, 0, int(flat.numel()))

    def part(self, index: int, flat: Any, start: int, stop: int) -> Any:
        """The sketch of elements ``[start, stop)`` of bucket ``index`` (``start`` a multiple
        of ``k``): the bucket's sketch is the sum of its parts' over any cut into such ranges.
        """
        self._check_row_start(start)
        return self._pass(index, flat, start, stop, sum_squares=False, divide_by=None)[0]

    def _check_row_start(self, start: int) -> None:
        """A part must start on a sketch row, or its positions misalign with the bucket's."""
        if start % self.k:
            raise ValueError(
                f"a part starts on a sketch row: {start} is not a multiple of {self.k}"
            )

    def measure(self, index: int, flat: Any, divide_by: int | None = None) -> tuple[Any, Any]:
        """One pass over bucket ``index``: its sketch and its sum of squares (0-d tensor), both
        of ``flat`` as it was; then, with ``divide_by``, ``flat`` divided by it in place (what
        PyTorch's ``allreduce_hook`` does before the AllReduce: the same ``div_``, so the same
        result to the bit), each chunk while it is still in cache."""
        return self._pass(index, flat, 0, int(flat.numel()), sum_squares=True, divide_by=divide_by)

    def _pass(
        self, index: int, flat: Any, start: int, stop: int, *, sum_squares: bool,
        divide_by: int | None,
    ) -> tuple[Any, Any]:  # fmt: skip
        import torch

        if on_host(flat):
            host_sums, host_squares = self._host_pass(
                index, flat, start, stop, sum_squares, divide_by
            )
            return torch.from_numpy(host_sums), (
                torch.tensor(host_squares, dtype=flat.dtype) if sum_squares else None
            )
        k = self.k
        signs = self.signs(index, flat)
        body = (stop - start) // k * k
        # chunks only where several reads share them (measure): a lone multiply and row sum
        # (a witness's part) ran slower chunked (1.6 against 1.2 ms per step on the bench's
        # ranks), and on a GPU a kernel per chunk would cost more than the cache saves
        shared = sum_squares or divide_by is not None
        chunk = min(body, self.chunk) if shared and not flat.is_cuda else body
        chunks = -(-body // chunk) if body else 0
        sums = flat.new_zeros(chunks + 1, k)  # the last row takes the tail of < k elements
        squares = flat.new_zeros(chunks + 1) if sum_squares else None
        buffer = self._buffer(flat, chunk)
        reciprocal = exact_reciprocal(divide_by)
        values_of = flat[start : start + body].split(chunk) if body else ()
        signs_of = signs[start : start + body].split(chunk) if body else ()
        pieces = zip(values_of, signs_of, strict=True)
        for row, (values, chunk_signs) in enumerate(pieces):
            product = torch.mul(values, chunk_signs, out=buffer[: values.numel()])
            torch.sum(product.view(-1, k), 0, out=sums[row])
            if squares is not None:
                torch.dot(values, values, out=squares[row])
            if reciprocal is not None:
                values.mul_(reciprocal)
            elif divide_by is not None:
                values.div_(divide_by)
        tail = flat[start + body : stop]
        if tail.numel():
            sums[chunks, : tail.numel()] = tail * signs[start + body : stop]
            if squares is not None:
                squares[chunks] = torch.dot(tail, tail)
            if reciprocal is not None:
                tail.mul_(reciprocal)
            elif divide_by is not None:
                tail.div_(divide_by)
        return sums.sum(0), (squares.sum() if squares is not None else None)

    def host_measure(
        self, index: int, flat: Any, divide_by: int | None = None
    ) -> tuple[Any, float]:
        """:meth:`measure` of a CPU tensor (:func:`on_host`) as host values: the sketch as a
        NumPy array, the sum of squares as a float (what the hook records; a PyTorch op on a
        0-d or 128-element tensor costs more than the arithmetic, ~15-50 us each on the
        bench's loaded ranks)."""
        return self._host_pass(index, flat, 0, int(flat.numel()), True, divide_by)

    def host_part(self, index: int, flat: Any, start: int, stop: int) -> Any:
        """:meth:`part` of a CPU tensor (:func:`on_host`), as a NumPy array."""
        self._check_row_start(start)
        return self._host_pass(index, flat, start, stop, False, None)[0]

    def _host_signs(self, index: int, flat: Any) -> Any:
        key = (index, int(flat.numel()), flat.dtype)
        signs = self._host.get(key)
        if signs is None:
            signs = self._host[key] = self.signs(index, flat).numpy()
        return signs

    def _host_pass(
        self, index: int, flat: Any, start: int, stop: int, sum_squares: bool,
        divide_by: int | None,
    ) -> tuple[Any, float]:  # fmt: skip
        """:meth:`_pass` on a CPU tensor through NumPy views of the same memory: NumPy's
        ``einsum("ij,ij->j")`` multiplies and sums the rows in one loop (PyTorch needs a
        multiply into a scratch buffer, then a row sum), and each NumPy call costs about a
        microsecond against several for a PyTorch op. On a cold 1 M-element bucket here: 1.3-1.4
        ms for the measuring pass against 2.4 ms, 0.6 ms for a 650 K witness part against 1.2
        ms in the ranks. Same signs, same rows, same division (IEEE, so the sent buffer is the
        same to the bit); the sums differ from the PyTorch path's by float rounding only."""
        import numpy as np

        k = self.k
        values = flat.detach().numpy()
        signs = self._host_signs(index, flat)
        body = (stop - start) // k * k
        chunk = min(body, self.chunk) if sum_squares or divide_by is not None else body
        sums = np.zeros(k, dtype=values.dtype)
        squares = values.dtype.type(0)
        reciprocal = exact_reciprocal(divide_by)
        scale = None if reciprocal is None else values.dtype.type(reciprocal)

        def fold(piece: Any) -> None:  # what a chunk and the tail both get once sketched
            nonlocal squares
            if sum_squares:
                squares += np.dot(piece, piece)
            if scale is not None:
                np.multiply(piece, scale, out=piece)
            elif divide_by is not None:
                np.divide(piece, divide_by, out=piece)

        with np.errstate(over="ignore", invalid="ignore"):  # an Inf/NaN is reported, not raised
            for first in range(start, start + body, chunk or 1):
                last = min(first + chunk, start + body)
                part = values[first:last]
                sums += np.einsum("ij,ij->j", part.reshape(-1, k), signs[first:last].reshape(-1, k))
                fold(part)
            tail = values[start + body : stop]
            if tail.size:
                sums[: tail.size] += tail * signs[start + body : stop]
                fold(tail)
        return sums, float(squares)


def exact_reciprocal(divide_by: int | None) -> float | None:
    """``1 / divide_by`` when it is a power of two, else None: then ``x * (1/n)`` is ``x / n``
    exactly (both round the same real number) and a multiply is cheaper than a division."""
    if divide_by and divide_by & (divide_by - 1) == 0:
        return 1.0 / divide_by
    return None


def on_host(flat: Any) -> bool:
    """Whether :class:`CountSketch`'s host methods take ``flat``: a CPU tensor of float32 or
    float64 (NumPy has no bfloat16; a GPU tensor stays with PyTorch's ops on the device)."""
    import torch

    return not flat.is_cuda and flat.dtype in (torch.float32, torch.float64)
