"""The straggler-effect simulator: what variability costs a synchronous training step at scale.

:func:`simulate_scaling` runs the Monte Carlo of a step model over training steps at several GPU
counts: the model, its equations and its parameters are in
:mod:`~hpcscope.analysis.simulate.step_model`; each count's steps are summarised into a
:class:`~hpcscope.analysis.simulate.scale_point.ScalePoint`, whose outputs and efficiency estimator
are in :mod:`~hpcscope.analysis.simulate.scale_point`. ``docs/simulate.md`` has the derivation and
the validation figures.

Engine: pure numpy, seeded. Random draws come from one stream per block of 64 GPUs and purpose
(jitter, hiccups, GC), so GPU ``i`` sees the same draws whatever the GPU count (common random
numbers: the curve over GPU counts is smooth and, for the same per-GPU variability, monotone),
and whatever the chunk size. Memory is bounded by processing steps in chunks of at most
``chunk_cells`` GPU-steps; one pass over the largest GPU count yields every smaller count
(prefix maxima), so a whole curve costs about as much as its largest point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.simulate.scale_point import ScalePoint, scale_point
from hpcscope.analysis.simulate.step_model import FloatArray, StepModel, require

#: GPUs per random stream; part of the seed contract (changing it changes every result).
BLOCK_GPUS = 64
_JITTER, _HICCUP, _GC = 0, 1, 2
_MAX_GAP = 1 << 40
#: Most GPUs the simulator accepts (the largest training clusters in the reference).
MAX_GPUS = 16_384


@dataclass(slots=True)
class _Accumulator:
    """Running totals per GPU count (one row each) over the chunks of simulated steps."""

    step_seconds: FloatArray
    arrival_sum: FloatArray
    wait_sum: FloatArray
    hiccup_steps: npt.NDArray[np.int64]
    gpu0_jitter: FloatArray


@dataclass(slots=True)
class _HiccupStream:
    """Bernoulli(p) hits over the cells (step, GPU-in-block) of one block, in step order.

    Gaps between hits are geometric, drawn in batches whose size depends only on ``p``, so the
    hit positions do not depend on how the steps are chunked.
    """

    generator: np.random.Generator
    probability: float
    batch: int
    pending: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    last: int = -1

    def hits_before(self, end_cell: int) -> npt.NDArray[np.int64]:
        while self.last < end_cell:
            gaps = self.generator.geometric(self.probability, size=self.batch)
            # a tiny p draws gaps near 2**63; no simulation reaches 2**40 cells of one block
            np.minimum(gaps, _MAX_GAP, out=gaps)
            positions = self.last + np.cumsum(gaps, dtype=np.int64)
            self.pending = np.concatenate([self.pending, positions])
            self.last = int(positions[-1])
        cut = int(np.searchsorted(self.pending, end_cell))
        hits, self.pending = self.pending[:cut], self.pending[cut:]
        return hits


def _stream(seed: int, purpose: int, block: int) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(purpose, block)))
    )


def _validate_counts(gpu_counts: Sequence[int], steps: int, chunk_cells: int) -> list[int]:
    require(len(gpu_counts) > 0, "gpus", "give at least one GPU count")
    for count in gpu_counts:
        require(
            1 <= count <= MAX_GPUS,
            "gpus",
            f"GPU counts must be between 1 and {MAX_GPUS:,} (got {count})",
        )
    require(steps >= 1, "steps", f"simulate at least one step (got {steps})")
    require(chunk_cells >= 1, "chunk_cells", "must be positive")
    return sorted(set(gpu_counts))


def simulate_scaling(
    model: StepModel,
    gpu_counts: Sequence[int],
    allreduce_seconds: Mapping[int, float],
    *,
    steps: int = 2000,
    seed: int = 0,
    gpu_hour_price: float = 0.0,
    chunk_cells: int = 1 << 21,
    exposed_seconds: Mapping[int, float] | None = None,
) -> tuple[ScalePoint, ...]:
    """Simulate ``steps`` training steps at each GPU count.

    Args:
        model: phases and variability of one GPU's step.
        gpu_counts: GPU counts to report (1 to :data:`MAX_GPUS`); returned sorted, unique.
        allreduce_seconds: time of the gradient AllReduce at each GPU count (from
            :func:`hpcscope.analysis.simulate.collectives.allreduce_cost`, or measured).
        steps: simulated steps per GPU count.
        seed: seeds every random stream; same seed, same result.
        gpu_hour_price: price of one GPU-hour, for ``lost_cost_per_day``.
        chunk_cells: most GPU-steps held in memory at once (memory bound, not a result knob).
        exposed_seconds: other communication on every step's critical path at each GPU count
            (the exposed expert all-to-all and the pipeline bubble of
            :mod:`~hpcscope.analysis.simulate.parallelism`); none when omitted.

    Returns:
        One :class:`ScalePoint` per GPU count, ascending.

    Raises:
        SimulationParameterError: naming the bad parameter.
    """
    counts = _validate_counts(gpu_counts, steps, chunk_cells)
    require(seed >= 0, "seed", f"must be a non-negative integer (got {seed})")
    require(
        math.isfinite(gpu_hour_price) and gpu_hour_price >= 0,
        "gpu_hour_price",
        f"must be a non-negative price (got {gpu_hour_price})",
    )
    for count in counts:
        require(count in allreduce_seconds, "allreduce_seconds", f"missing for {count} GPUs")
        value = allreduce_seconds[count]
        require(
            math.isfinite(value) and value >= 0,
            "allreduce_seconds",
            f"must be a non-negative duration (got {value} for {count} GPUs)",
        )
    exposed_map = exposed_seconds or {}
    for count in counts:
        value = exposed_map.get(count, 0.0)
        require(
            math.isfinite(value) and value >= 0,
            "exposed_seconds",
            f"must be a non-negative duration (got {value} for {count} GPUs)",
        )
    exposed = np.array([exposed_map.get(n, 0.0) for n in counts])
    largest = counts[-1]
    blocks = math.ceil(largest / BLOCK_GPUS)
    compute, optimizer = model.per_gpu_seconds(largest)
    ns = np.array(counts)
    starts = np.concatenate([[0], ns[:-1]])
    optimizer_max = np.maximum.accumulate(np.maximum.reduceat(optimizer, starts))
    optimizer_sum = np.cumsum(np.add.reduceat(optimizer, starts))
    allreduce = np.array([allreduce_seconds[n] for n in counts])
    acc = _Accumulator(
        step_seconds=np.empty((len(counts), steps)),
        arrival_sum=np.zeros(len(counts)),
        wait_sum=np.zeros(len(counts)),
        hiccup_steps=np.zeros(len(counts), np.int64),
        gpu0_jitter=np.ones(steps),
    )
    jitter = [_stream(seed, _JITTER, b) for b in range(blocks)] if model.jitter_cv > 0 else []
    hiccups = _hiccup_streams(model, seed, blocks)
    gc_offsets = _gc_offsets(model, seed, blocks, largest)
    rows_per_chunk = max(1, chunk_cells // (blocks * BLOCK_GPUS))
    for first in range(0, steps, rows_per_chunk):
        rows = min(rows_per_chunk, steps - first)
        arrival, gpu0 = _arrivals(model, jitter, compute, rows, largest)
        acc.gpu0_jitter[first : first + rows] = gpu0
        hit_gpu = np.full(rows, largest, np.int64)
        if hiccups:
            _add_hiccups(arrival, hiccups, model.hiccup_seconds, first, rows, hit_gpu)
        if gc_offsets is not None:
            _add_gc(arrival, gc_offsets, model.gc_interval_steps, model.gc_pause_seconds, first)
        seg_max = np.maximum.reduceat(arrival, starts, axis=1)
        prefix_max = np.maximum.accumulate(seg_max, axis=1)
        prefix_sum = np.cumsum(np.add.reduceat(arrival, starts, axis=1), axis=1)
        acc.step_seconds[:, first : first + rows] = (
            prefix_max + allreduce + exposed + optimizer_max
        ).T
        acc.arrival_sum += prefix_sum.sum(axis=0)
        # waits are >= 0; n * max - sum can round to -1e-16
        acc.wait_sum += np.maximum(ns * prefix_max - prefix_sum, 0.0).sum(axis=0)
        acc.wait_sum += rows * np.maximum(ns * optimizer_max - optimizer_sum, 0.0)
        acc.hiccup_steps += (hit_gpu[:, None] < ns[None, :]).sum(axis=0)
    return tuple(
        scale_point(
            model,
            acc.step_seconds[k],
            gpus=count,
            arrival_seconds_sum=float(acc.arrival_sum[k]),
            wait_seconds_sum=float(acc.wait_sum[k]),
            hiccup_steps=int(acc.hiccup_steps[k]),
            gpu0_jitter=acc.gpu0_jitter,
            allreduce_seconds=float(allreduce[k]),
            optimizer_seconds=float(optimizer_max[k]),
            gpu_hour_price=gpu_hour_price,
            exposed_seconds=float(exposed[k]),
        )
        for k, count in enumerate(counts)
    )


def _arrivals(
    model: StepModel,
    jitter: list[np.random.Generator],
    compute: FloatArray,
    rows: int,
    largest: int,
) -> tuple[FloatArray, FloatArray]:
    """Pre-barrier compute of ``rows`` steps x ``largest`` GPUs, jittered, and the jitter
    factor of GPU 0 in each step. Draws are float32 (half the cost of float64, far more
    precise than any jitter CV); durations are float64."""
    if not jitter:
        return np.broadcast_to(compute, (rows, largest)).copy(), np.ones(rows)
    draws = np.empty((len(jitter), rows, BLOCK_GPUS), np.float32)
    for block, generator in enumerate(jitter):
        generator.standard_normal(dtype=np.float32, out=draws[block])
    cv = model.jitter_cv
    if model.jitter_distribution == "lognormal":
        sigma = math.sqrt(math.log1p(cv * cv))
        draws *= np.float32(sigma)
        draws -= np.float32(sigma * sigma / 2)
        np.exp(draws, out=draws)
    else:
        draws *= np.float32(cv)
        draws += np.float32(1.0)
        np.maximum(draws, np.float32(0.0), out=draws)
    factors = draws.transpose(1, 0, 2).reshape(rows, -1)[:, :largest]
    result: npt.NDArray[np.float64] = factors * compute
    return result, factors[:, 0].astype(np.float64)


def _hiccup_streams(model: StepModel, seed: int, blocks: int) -> list[_HiccupStream]:
    p = model.hiccup_probability
    if p <= 0 or model.hiccup_seconds <= 0:
        return []
    batch = int(min(1 << 16, max(256, p * (1 << 16))))
    return [_HiccupStream(_stream(seed, _HICCUP, b), p, batch) for b in range(blocks)]


def _add_hiccups(
    arrival: FloatArray,
    streams: list[_HiccupStream],
    seconds: float,
    first: int,
    rows: int,
    hit_gpu: npt.NDArray[np.int64],
) -> None:
    largest = arrival.shape[1]
    end_cell = (first + rows) * BLOCK_GPUS
    for block, stream in enumerate(streams):
        cells = stream.hits_before(end_cell)
        if cells.size == 0:
            continue
        row = cells // BLOCK_GPUS - first
        gpu = block * BLOCK_GPUS + cells % BLOCK_GPUS
        keep = gpu < largest
        row, gpu = row[keep], gpu[keep]
        arrival[row, gpu] += seconds
        np.minimum.at(hit_gpu, row, gpu)


def _gc_offsets(
    model: StepModel, seed: int, blocks: int, largest: int
) -> npt.NDArray[np.int64] | None:
    """Phase of each GPU's GC cycle (all 0 when synchronised); None without GC pauses."""
    interval = model.gc_interval_steps
    if interval <= 0 or model.gc_pause_seconds <= 0:
        return None
    if model.gc_synchronized:
        return np.zeros(largest, np.int64)
    offsets = [_stream(seed, _GC, b).integers(0, interval, BLOCK_GPUS) for b in range(blocks)]
    return np.concatenate(offsets)[:largest]


def _add_gc(
    arrival: FloatArray,
    offsets: npt.NDArray[np.int64],
    interval: int,
    pause_seconds: float,
    first: int,
) -> None:
    """GPU ``i`` pauses in the steps ``t`` with ``(t + offset_i) % interval == 0``."""
    rows = arrival.shape[0]
    first_hit = (-offsets - first) % interval  # row of each GPU's first pause in this chunk
    counts = np.where(first_hit < rows, (rows - 1 - first_hit) // interval + 1, 0)
    total = int(counts.sum())
    if total == 0:
        return
    gpu = np.repeat(np.arange(offsets.size), counts)
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    arrival[first_hit[gpu] + within * interval, gpu] += pause_seconds
