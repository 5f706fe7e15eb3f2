"""One training step, GPU by GPU, and the ring AllReduce schedule: what the step player draws.

:func:`step_timeline` lays out a single step of
:class:`~hpcscope.analysis.simulate.step_model.StepModel` on ``n`` GPUs: each GPU's data load,
forward, backward (scaled by its persistent straggler factors and by one jitter draw, as in the
simulator), an optional hiccup, then the wait at the barrier until the last GPU arrives, the
AllReduce that starts for everyone at that instant, and each GPU's optimizer step.
:func:`ring_schedule` gives the chunk transfers of a ring AllReduce (reduce-scatter then all-gather,
``2(n-1)`` steps) over the ranks in node order, and marks each hop as NVLink (inside a node) or
network (between nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hpcscope.analysis.simulate.step_model import (
    PRE_BARRIER_PHASES,
    SimulationParameterError,
    StepModel,
)

HopLink = Literal["nvlink", "network"]
RingStage = Literal["reduce-scatter", "all-gather"]

#: Most lanes the player lays out (a page with more GPU lanes is no longer readable).
MAX_TIMELINE_GPUS = 256


@dataclass(frozen=True, slots=True)
class Segment:
    """A span of one GPU's step. ``phase``: a pre-barrier phase, ``hiccup``, ``barrier_wait``,
    ``allreduce``, ``optimizer`` or ``idle`` (done, waiting for the slowest optimizer)."""

    phase: str
    start_seconds: float
    end_seconds: float

    @property
    def seconds(self) -> float:
        return self.end_seconds - self.start_seconds


@dataclass(frozen=True, slots=True)
class Lane:
    """One GPU's step: its segments in time order, when it arrived and how long it waited."""

    gpu: int
    node: int
    local_index: int
    segments: tuple[Segment, ...]
    arrival_seconds: float
    wait_seconds: float
    slowdown_phases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RingHop:
    """The link from ``source`` to the next rank of the ring, ``target``."""

    source: int
    target: int
    link: HopLink


@dataclass(frozen=True, slots=True)
class RingTransfer:
    """In ring step ``step``, ``source`` sends chunk ``chunk`` to ``target``."""

    step: int
    stage: RingStage
    source: int
    target: int
    chunk: int


@dataclass(frozen=True, slots=True)
class RingSchedule:
    """A ring AllReduce over ``gpus`` ranks (rank order, ``gpus_per_node`` per node)."""

    gpus: int
    gpus_per_node: int
    hops: tuple[RingHop, ...]
    transfers: tuple[RingTransfer, ...]

    @property
    def steps(self) -> int:
        return 2 * (self.gpus - 1)


@dataclass(frozen=True, slots=True)
class StepTimeline:
    """One step of ``gpus`` GPUs. Times in seconds from the start of the step."""

    gpus: int
    lanes: tuple[Lane, ...]
    barrier_seconds: float
    allreduce_seconds: float
    step_seconds: float
    ideal_step_seconds: float
    efficiency: float
    barrier_wait_ratio: float
    ring: RingSchedule

    @property
    def allreduce_end_seconds(self) -> float:
        return self.barrier_seconds + self.allreduce_seconds


def ring_schedule(gpus: int, gpus_per_node: int) -> RingSchedule:
    """The transfers of a ring AllReduce over ranks ``0..gpus-1`` in node order.

    Reduce-scatter: in step ``s`` rank ``r`` sends its partial sum of chunk ``(r - s) mod n``
    to rank ``r + 1``, which adds its own; after ``n - 1`` steps rank ``r`` holds the full sum of
    chunk ``(r + 1) mod n``. All-gather: in step ``s`` rank ``r`` forwards chunk
    ``(r + 1 - s) mod n``. Every rank sends and receives ``2(n-1)/n`` of the buffer, which is
    where the ``2(n-1)/n · S/B`` of the cost model comes from.
    """
    if gpus < 1:
        raise SimulationParameterError("gpus", "must be at least 1")
    if gpus_per_node < 1:
        raise SimulationParameterError("gpus_per_node", "must be at least 1")
    hops = (
        tuple(
            RingHop(
                source=r,
                target=(r + 1) % gpus,
                link="nvlink"
                if r // gpus_per_node == ((r + 1) % gpus) // gpus_per_node
                else "network",
            )
            for r in range(gpus)
        )
        if gpus > 1
        else ()
    )
    transfers: list[RingTransfer] = []
    for s in range(gpus - 1):
        for r in range(gpus):
            transfers.append(RingTransfer(s, "reduce-scatter", r, (r + 1) % gpus, (r - s) % gpus))
    for s in range(gpus - 1):
        for r in range(gpus):
            transfers.append(
                RingTransfer(gpus - 1 + s, "all-gather", r, (r + 1) % gpus, (r + 1 - s) % gpus)
            )
    return RingSchedule(gpus, gpus_per_node, hops, tuple(transfers))


def step_timeline(
    model: StepModel,
    gpus: int,
    *,
    allreduce_seconds: float,
    gpus_per_node: int,
    seed: int = 0,
) -> StepTimeline:
    """Lay out one step of ``model`` on ``gpus`` GPUs.

    Args:
        model: phases, stragglers, jitter and hiccups (GC pauses are periodic over many
            steps and are left out of a single step).
        gpus: lanes to lay out (1 to :data:`MAX_TIMELINE_GPUS`).
        allreduce_seconds: duration of the AllReduce at this GPU count.
        gpus_per_node: for the node of each lane and the ring's hop links.
        seed: seeds this step's jitter and hiccup draws.

    Raises:
        SimulationParameterError: naming the bad parameter.
    """
    if not 1 <= gpus <= MAX_TIMELINE_GPUS:
        raise SimulationParameterError(
            "gpus", f"the step player lays out 1 to {MAX_TIMELINE_GPUS} GPUs (got {gpus})"
        )
    if not (math.isfinite(allreduce_seconds) and allreduce_seconds >= 0):
        raise SimulationParameterError("allreduce_seconds", "must be a non-negative duration")
    if seed < 0:
        raise SimulationParameterError("seed", "must be a non-negative integer")
    rng = np.random.default_rng(seed)
    jitter = jitter_factors(model, rng.standard_normal(gpus))
    hiccup = (rng.random(gpus) < model.hiccup_probability) * model.hiccup_seconds
    factors = model.factors(gpus)
    optimizer = model.optimizer_seconds * factors["optimizer"]
    durations = {
        phase: model.phase_seconds(phase) * factors[phase] * jitter for phase in PRE_BARRIER_PHASES
    }
    arrival = sum((durations[p] for p in PRE_BARRIER_PHASES), np.zeros(gpus)) + hiccup
    barrier = float(arrival.max())
    allreduce_end = barrier + allreduce_seconds
    step = allreduce_end + float(optimizer.max())
    lanes = []
    for gpu in range(gpus):
        segments: list[Segment] = []
        clock = 0.0
        for phase in PRE_BARRIER_PHASES:
            length = float(durations[phase][gpu])
            if length > 0:
                segments.append(Segment(phase, clock, clock + length))
                clock += length
        if hiccup[gpu] > 0:
            segments.append(Segment("hiccup", clock, clock + float(hiccup[gpu])))
            clock += float(hiccup[gpu])
        if barrier - clock > 0:
            segments.append(Segment("barrier_wait", clock, barrier))
        if allreduce_seconds > 0:
            segments.append(Segment("allreduce", barrier, allreduce_end))
        done = allreduce_end + float(optimizer[gpu])
        if optimizer[gpu] > 0:
            segments.append(Segment("optimizer", allreduce_end, done))
        if step - done > 0:
            segments.append(Segment("idle", done, step))
        lanes.append(
            Lane(
                gpu=gpu,
                node=gpu // gpus_per_node,
                local_index=gpu % gpus_per_node,
                segments=tuple(segments),
                arrival_seconds=float(arrival[gpu]),
                wait_seconds=barrier - float(arrival[gpu]) + step - done,
                slowdown_phases=tuple(
                    phase for phase, values in factors.items() if values[gpu] > 1
                ),
            )
        )
    ideal = model.compute_seconds * float(jitter[0]) + model.optimizer_seconds + allreduce_seconds
    waited = sum(lane.wait_seconds for lane in lanes)
    return StepTimeline(
        gpus=gpus,
        lanes=tuple(lanes),
        barrier_seconds=barrier,
        allreduce_seconds=allreduce_seconds,
        step_seconds=step,
        ideal_step_seconds=model.compute_seconds + model.optimizer_seconds + allreduce_seconds,
        efficiency=ideal / step if step > 0 else 1.0,
        barrier_wait_ratio=waited / (gpus * step) if step > 0 else 0.0,
        ring=ring_schedule(gpus, gpus_per_node),
    )


def jitter_factors(model: StepModel, normals: np.ndarray) -> np.ndarray:
    """The simulator's jitter factors (mean 1) from standard normal draws."""
    cv = model.jitter_cv
    if cv == 0:
        return np.ones_like(normals)
    if model.jitter_distribution == "lognormal":
        sigma = math.sqrt(math.log1p(cv * cv))
        return np.exp(sigma * normals - sigma * sigma / 2)
    return np.maximum(1 + cv * normals, 0.0)
