"""The straggler-effect simulator: what variability costs a synchronous training step at scale.

Model (``docs/simulate.md`` has the derivation and the validation figures). For GPU ``i`` in
step ``t``::

    compute_i(t) = (data_load + forward + backward + other)_i * X_i(t)      # before the barrier
    X_i(t)       ~ LogNormal(mean 1, CV)  (or Normal(1, CV) clipped at 0)
    arrival_i(t) = compute_i(t) + hiccup_i(t) + gc_i(t)
    step(t)      = max_i arrival_i(t) + T_allreduce(n) + max_i optimizer_i
    wait_i(t)    = max_j arrival_j(t) - arrival_i(t)  (+ max_j optimizer_j - optimizer_i)

Each phase mean is multiplied by a persistent straggler factor for the GPUs named in
:class:`Straggler`; hiccups add a fixed delay with probability ``p`` per GPU and step; GC pauses
hit a GPU every ``gc_interval_steps`` steps, at a phase offset that is random per GPU
(``gc_synchronized`` aligns them, as Megatron-LM's manual GC does). ``CV`` is the coefficient
of variation of a GPU's whole pre-barrier compute time in one step (the quantity the order
statistics tables use); the optimizer step is not jittered.

Outputs per GPU count: expected step time with percentile bands over steps, *efficiency*
``ideal / E[step]`` where ideal is the same step without any variability (nominal phases, the
same AllReduce), *scaling efficiency* ``(compute + optimizer) / E[step]`` (communication
counted as loss), the barrier-wait share of GPU time, and GPU-hours and money lost per day.

Estimator: efficiency is ``ideal / mean simulated step``, where ideal uses the nominal compute,
lowered to GPU 0's mean jittered compute over the simulated steps when that is smaller. GPU 0
takes part in every step at every GPU count and every step lasts at least as long as GPU 0's
compute, so the estimate never exceeds 1, not even by Monte Carlo noise at one or two GPUs
where the expected loss is about 0; it equals the nominal ratio whenever GPU 0 ran at or
above its nominal mean (the correction is at most a few standard errors of one GPU's mean,
~0.1 % of the compute at 10,000 steps and CV 10 %). With common random numbers the numerator
does not depend on the GPU count, so efficiency never rises when GPUs are added at the same
AllReduce time. The percentile band is ``nominal ideal / step`` percentiles, capped at 1 (a
step where every GPU ran fast is not more than 100 % efficient).

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
from typing import Literal

import numpy as np
import numpy.typing as npt

JitterDistribution = Literal["lognormal", "normal"]

#: Phases a GPU runs before it arrives at the barrier of the gradient AllReduce.
PRE_BARRIER_PHASES: tuple[str, ...] = ("data_load", "forward", "backward", "other")
#: Phases a persistent straggler can be slow in.
STRAGGLER_PHASES: tuple[str, ...] = (*PRE_BARRIER_PHASES, "optimizer")

#: GPUs per random stream; part of the seed contract (changing it changes every result).
BLOCK_GPUS = 64
_JITTER, _HICCUP, _GC = 0, 1, 2
_MAX_GAP = 1 << 40
#: Most GPUs the simulator accepts (the largest training clusters in the reference).
MAX_GPUS = 16_384

FloatArray = npt.NDArray[np.float64]


class SimulationParameterError(ValueError):
    """A parameter the model cannot use; ``field`` names it (as in the API and the CLI)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class Straggler:
    """A GPU that is persistently slow in one phase: its phase takes ``factor`` (>= 1) times
    longer than on its peers."""

    gpu: int
    phase: str = "backward"
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.gpu < 0:
            raise SimulationParameterError("straggler_gpu", f"GPU index {self.gpu} is negative")
        if self.phase not in STRAGGLER_PHASES:
            raise SimulationParameterError(
                "straggler_phase",
                f"unknown phase {self.phase!r} (one of {', '.join(STRAGGLER_PHASES)})",
            )
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise SimulationParameterError(
                "straggler_factor",
                f"a straggler is slower than its peers: the factor must be at least 1 "
                f"(got {self.factor})",
            )


def _require(condition: bool, name: str, message: str) -> None:
    if not condition:
        raise SimulationParameterError(name, message)


@dataclass(frozen=True, slots=True)
class StepModel:
    """One data-parallel training step, per GPU, as data. Times in seconds.

    The defaults are the illustrative 42 ms step of the reference (data 2, forward 10,
    backward 20, AllReduce about 6, optimizer 4 ms), without variability.
    """

    data_load_seconds: float = 0.002
    forward_seconds: float = 0.010
    backward_seconds: float = 0.020
    other_seconds: float = 0.0
    optimizer_seconds: float = 0.004
    jitter_cv: float = 0.0
    jitter_distribution: JitterDistribution = "lognormal"
    stragglers: tuple[Straggler, ...] = ()
    hiccup_probability: float = 0.0
    hiccup_seconds: float = 0.0
    gc_interval_steps: int = 0
    gc_pause_seconds: float = 0.0
    gc_synchronized: bool = False

    def __post_init__(self) -> None:
        for name in ("data_load", "forward", "backward", "other", "optimizer"):
            value = getattr(self, f"{name}_seconds")
            _require(
                math.isfinite(value) and value >= 0,
                f"{name}_seconds",
                f"must be a non-negative number of seconds (got {value})",
            )
        _require(
            self.compute_seconds > 0,
            "compute_seconds",
            "the phases before the barrier add up to zero",
        )
        _require(
            math.isfinite(self.jitter_cv) and 0 <= self.jitter_cv <= 1,
            "jitter_cv",
            f"must be between 0 and 1 (got {self.jitter_cv})",
        )
        _require(
            self.jitter_distribution in ("lognormal", "normal"),
            "jitter_distribution",
            f"unknown distribution {self.jitter_distribution!r} (lognormal or normal)",
        )
        _require(
            math.isfinite(self.hiccup_probability) and 0 <= self.hiccup_probability <= 1,
            "hiccup_probability",
            f"is a probability per GPU and step, between 0 and 1 (got {self.hiccup_probability})",
        )
        _require(
            math.isfinite(self.hiccup_seconds) and self.hiccup_seconds >= 0,
            "hiccup_seconds",
            f"must be a non-negative duration (got {self.hiccup_seconds})",
        )
        _require(
            self.gc_interval_steps >= 0,
            "gc_interval_steps",
            f"must be 0 (no GC pauses) or a number of steps (got {self.gc_interval_steps})",
        )
        _require(
            math.isfinite(self.gc_pause_seconds) and self.gc_pause_seconds >= 0,
            "gc_pause_seconds",
            f"must be a non-negative duration (got {self.gc_pause_seconds})",
        )

    @property
    def compute_seconds(self) -> float:
        """Nominal pre-barrier time of a healthy GPU."""
        return (
            self.data_load_seconds
            + self.forward_seconds
            + self.backward_seconds
            + self.other_seconds
        )

    def phase_seconds(self, phase: str) -> float:
        """Nominal duration of ``phase`` (one of :data:`STRAGGLER_PHASES`)."""
        value: float = getattr(self, f"{phase}_seconds")
        return value

    def factors(self, gpus: int) -> dict[str, FloatArray]:
        """Per-phase slowdown factor of each of the first ``gpus`` GPUs (1 when healthy)."""
        out = {phase: np.ones(gpus) for phase in STRAGGLER_PHASES}
        for straggler in self.stragglers:
            if straggler.gpu < gpus:
                out[straggler.phase][straggler.gpu] *= straggler.factor
        return out

    def per_gpu_seconds(self, gpus: int) -> tuple[FloatArray, FloatArray]:
        """(pre-barrier compute, optimizer) seconds of each GPU before jitter."""
        factors = self.factors(gpus)
        compute = np.zeros(gpus)
        for phase in PRE_BARRIER_PHASES:
            compute += self.phase_seconds(phase) * factors[phase]
        return compute, self.optimizer_seconds * factors["optimizer"]


@dataclass(frozen=True, slots=True)
class ScalePoint:
    """The simulated outcome at one GPU count. Times in seconds, ratios 0-1.

    ``step_seconds_pNN`` are percentiles over the simulated steps; ``efficiency_p05`` is the
    efficiency of a slow (95th percentile) step, ``efficiency_p95`` of a fast (5th) one.
    """

    gpus: int
    steps: int
    step_seconds: float
    step_seconds_p05: float
    step_seconds_p50: float
    step_seconds_p95: float
    step_seconds_p99: float
    ideal_step_seconds: float
    compute_seconds: float
    allreduce_seconds: float
    optimizer_seconds: float
    efficiency: float
    efficiency_p05: float
    efficiency_p95: float
    scaling_efficiency: float
    barrier_wait_seconds: float
    barrier_wait_ratio: float
    hiccup_step_ratio: float
    gpu_hours_per_day: float
    lost_gpu_hours_per_day: float
    lost_cost_per_day: float


@dataclass(slots=True)
class _Accumulator:
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
    _require(len(gpu_counts) > 0, "gpus", "give at least one GPU count")
    for count in gpu_counts:
        _require(
            1 <= count <= MAX_GPUS,
            "gpus",
            f"GPU counts must be between 1 and {MAX_GPUS:,} (got {count})",
        )
    _require(steps >= 1, "steps", f"simulate at least one step (got {steps})")
    _require(chunk_cells >= 1, "chunk_cells", "must be positive")
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
) -> tuple[ScalePoint, ...]:
    """Simulate ``steps`` training steps at each GPU count.

    Args:
        model: phases and variability of one GPU's step.
        gpu_counts: GPU counts to report (1 to :data:`MAX_GPUS`); returned sorted, unique.
        allreduce_seconds: time of the gradient AllReduce at each GPU count (from
            :func:`hpcscope.analysis.collectives.allreduce_cost`, or measured).
        steps: simulated steps per GPU count.
        seed: seeds every random stream; same seed, same result.
        gpu_hour_price: price of one GPU-hour, for ``lost_cost_per_day``.
        chunk_cells: most GPU-steps held in memory at once (memory bound, not a result knob).

    Returns:
        One :class:`ScalePoint` per GPU count, ascending.

    Raises:
        SimulationParameterError: naming the bad parameter.
    """
    counts = _validate_counts(gpu_counts, steps, chunk_cells)
    _require(seed >= 0, "seed", f"must be a non-negative integer (got {seed})")
    _require(
        math.isfinite(gpu_hour_price) and gpu_hour_price >= 0,
        "gpu_hour_price",
        f"must be a non-negative price (got {gpu_hour_price})",
    )
    for count in counts:
        _require(count in allreduce_seconds, "allreduce_seconds", f"missing for {count} GPUs")
        value = allreduce_seconds[count]
        _require(
            math.isfinite(value) and value >= 0,
            "allreduce_seconds",
            f"must be a non-negative duration (got {value} for {count} GPUs)",
        )
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
        acc.step_seconds[:, first : first + rows] = (prefix_max + allreduce + optimizer_max).T
        acc.arrival_sum += prefix_sum.sum(axis=0)
        # waits are >= 0; n * max - sum can round to -1e-16
        acc.wait_sum += np.maximum(ns * prefix_max - prefix_sum, 0.0).sum(axis=0)
        acc.wait_sum += rows * np.maximum(ns * optimizer_max - optimizer_sum, 0.0)
        acc.hiccup_steps += (hit_gpu[:, None] < ns[None, :]).sum(axis=0)
    return tuple(
        _point(
            model,
            acc,
            k,
            count,
            steps,
            float(allreduce[k]),
            float(optimizer_max[k]),
            gpu_hour_price,
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


def _point(
    model: StepModel,
    acc: _Accumulator,
    k: int,
    gpus: int,
    steps: int,
    allreduce: float,
    optimizer_max: float,
    price: float,
) -> ScalePoint:
    series = acc.step_seconds[k]
    mean = float(series.mean())
    p05, p50, p95, p99 = (float(v) for v in np.percentile(series, [5, 50, 95, 99]))
    nominal = model.compute_seconds + model.optimizer_seconds + allreduce
    # Useful work of a step: the nominal compute, except when GPU 0 (in every step at every
    # GPU count) ran faster than nominal on average over these steps; see the module docstring.
    compute_mean = min(model.compute_seconds, model.compute_seconds * float(acc.gpu0_jitter.mean()))
    useful = compute_mean + model.optimizer_seconds
    efficiency = (useful + allreduce) / mean if mean > 0 else 1.0
    band_low = min(1.0, nominal / p95) if p95 > 0 else 1.0
    band_high = min(1.0, nominal / p05) if p05 > 0 else 1.0
    gpu_hours = 24.0 * gpus
    lost = gpu_hours * (1.0 - efficiency)
    return ScalePoint(
        gpus=gpus,
        steps=steps,
        step_seconds=mean,
        step_seconds_p05=p05,
        step_seconds_p50=p50,
        step_seconds_p95=p95,
        step_seconds_p99=p99,
        ideal_step_seconds=nominal,
        compute_seconds=float(acc.arrival_sum[k]) / (gpus * steps),
        allreduce_seconds=allreduce,
        optimizer_seconds=optimizer_max,
        efficiency=efficiency,
        efficiency_p05=band_low,
        efficiency_p95=band_high,
        scaling_efficiency=useful / mean if mean > 0 else 1.0,
        barrier_wait_seconds=float(acc.wait_sum[k]) / (gpus * steps),
        barrier_wait_ratio=float(acc.wait_sum[k]) / (gpus * float(series.sum()))
        if mean > 0
        else 0.0,
        hiccup_step_ratio=float(acc.hiccup_steps[k]) / steps,
        gpu_hours_per_day=gpu_hours,
        lost_gpu_hours_per_day=lost,
        lost_cost_per_day=lost * price,
    )
