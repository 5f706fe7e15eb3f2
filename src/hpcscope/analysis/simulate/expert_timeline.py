"""One mixture-of-experts training step, GPU by GPU, with the expert all-to-all on a second stream.

:func:`expert_step_timeline` lays out one step of a
:class:`~hpcscope.analysis.simulate.step_model.StepModel` whose forward and backward passes are
split into ``layers`` MoE layers. Each layer runs its GEMMs on the compute stream and an
all-to-all (expert dispatch and combine, :func:`~hpcscope.analysis.simulate.parallelism.
alltoall_cost`) among the ``group_ranks`` GPUs of its expert-parallel group:

* **overlapped** (DeepEP, dual micro-batch overlap): the all-to-all runs on the second stream
  from the moment every rank of the group is ready (``S = max_j ready_j``) for ``c`` seconds,
  while each rank's GEMMs run from its own ready time for ``g_i``. A rank's part of the
  all-to-all that falls under its GEMMs is **hidden**; the rest is **exposed**: the compute
  stream idles until ``S + c``. Idle time before ``S`` (a peer is late) is an expert-group wait.
* **not overlapped**: the all-to-all starts when every rank of the group has finished its
  GEMMs and is exposed whole.

After the backward pass the whole cluster meets at the barrier of the data-parallel gradient
AllReduce, then applies the optimizer, as in :mod:`~hpcscope.analysis.simulate.step_timeline`.
A straggler's slowness now shows at every layer: its peers wait for it inside the group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcscope.analysis.simulate.parallelism import Overlap, overlap
from hpcscope.analysis.simulate.step_model import FloatArray, SimulationParameterError, StepModel
from hpcscope.analysis.simulate.step_timeline import (
    MAX_TIMELINE_GPUS,
    RingSchedule,
    Segment,
    jitter_factors,
    ring_schedule,
)


@dataclass(frozen=True, slots=True)
class ExpertLane:
    """One GPU's step: the compute stream (its critical path) and the second stream's
    all-to-all spans, with its hidden and exposed all-to-all time."""

    gpu: int
    node: int
    local_index: int
    group: int
    segments: tuple[Segment, ...]
    comm_segments: tuple[Segment, ...]
    arrival_seconds: float
    wait_seconds: float
    alltoall_hidden_seconds: float
    alltoall_exposed_seconds: float
    slowdown_phases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExpertTimeline:
    """One MoE step of ``gpus`` GPUs. Times in seconds from the start of the step; the
    all-to-all totals are per GPU, averaged over the GPUs."""

    gpus: int
    group_ranks: int
    layers: int
    overlapped: bool
    lanes: tuple[ExpertLane, ...]
    forward_alltoall_seconds: float
    backward_alltoall_seconds: float
    barrier_seconds: float
    allreduce_seconds: float
    step_seconds: float
    ideal_step_seconds: float
    efficiency: float
    barrier_wait_ratio: float
    alltoall_seconds: float
    alltoall_hidden_seconds: float
    alltoall_exposed_seconds: float
    ring: RingSchedule


@dataclass(slots=True)
class _Track:
    segments: list[Segment]
    comm: list[Segment]
    hidden: float = 0.0
    exposed: float = 0.0

    def add(self, phase: str, start: float, end: float) -> None:
        if end - start > 1e-15:
            self.segments.append(Segment(phase, start, end))


def _pass(
    tracks: list[_Track],
    ready: FloatArray,
    gemm: FloatArray,
    phase: str,
    comm_seconds: float,
    group_ranks: int,
    overlapped: bool,
) -> FloatArray:
    """One MoE layer of ``phase`` for every GPU; returns when each GPU is ready for the next."""
    gpus = ready.shape[0]
    out = np.empty(gpus)
    for first in range(0, gpus, group_ranks):
        members = range(first, min(gpus, first + group_ranks))
        if overlapped:
            start = max(float(ready[i]) for i in members)
        else:
            start = max(float(ready[i] + gemm[i]) for i in members)
        end = start + comm_seconds
        for i in members:
            track = tracks[i]
            r, g = float(ready[i]), float(gemm[i])
            track.add(phase, r, r + g)
            if comm_seconds > 0:
                track.comm.append(Segment("alltoall", start, end))
            if overlapped:
                # exposed: the all-to-all after this rank's GEMMs (it starts at or after r)
                exposed = max(0.0, end - max(r + g, start))
                split = Overlap(comm_seconds - exposed, exposed)
                track.add("ep_wait", r + g, max(r + g, start))
                track.add("alltoall_exposed", max(r + g, start), end)
                out[i] = max(r + g, end)
            else:
                split = overlap(comm_seconds, g, overlapped=False)
                track.add("ep_wait", r + g, start)
                track.add("alltoall_exposed", start, end)
                out[i] = end
            track.hidden += split.hidden_seconds
            track.exposed += split.exposed_seconds
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    layers: int
    group_ranks: int
    alltoall: tuple[float, float]
    allreduce_seconds: float
    overlapped: bool


def _layout(
    durations: dict[str, FloatArray], hiccup: FloatArray, optimizer: FloatArray, plan: _Plan
) -> tuple[list[_Track], FloatArray, float, float]:
    """(tracks, arrival at the AllReduce barrier, barrier, step end)."""
    layers, group_ranks, overlapped = plan.layers, plan.group_ranks, plan.overlapped
    alltoall, allreduce_seconds = plan.alltoall, plan.allreduce_seconds
    gpus = hiccup.shape[0]
    tracks = [_Track([], []) for _ in range(gpus)]
    clock = np.zeros(gpus)
    for i in range(gpus):
        tracks[i].add("data_load", 0.0, float(durations["data_load"][i]))
    clock = clock + durations["data_load"]
    for phase, comm in (("forward", alltoall[0]), ("backward", alltoall[1])):
        gemm = durations[phase] / layers
        for _ in range(layers):
            clock = _pass(tracks, clock, gemm, phase, comm, group_ranks, overlapped)
    for name, extra in (("other", durations["other"]), ("hiccup", hiccup)):
        for i in range(gpus):
            tracks[i].add(name, float(clock[i]), float(clock[i] + extra[i]))
        clock = clock + extra
    barrier = float(clock.max())
    allreduce_end = barrier + allreduce_seconds
    step = allreduce_end + float(optimizer.max())
    for i in range(gpus):
        track = tracks[i]
        track.add("barrier_wait", float(clock[i]), barrier)
        track.add("allreduce", barrier, allreduce_end)
        done = allreduce_end + float(optimizer[i])
        track.add("optimizer", allreduce_end, done)
        track.add("idle", done, step)
    return tracks, clock, barrier, step


def expert_step_timeline(
    model: StepModel,
    gpus: int,
    *,
    layers: int,
    group_ranks: int,
    forward_alltoall_seconds: float,
    backward_alltoall_seconds: float,
    allreduce_seconds: float,
    gpus_per_node: int,
    overlapped: bool = True,
    seed: int = 0,
) -> ExpertTimeline:
    """Lay out one MoE step of ``model`` on ``gpus`` GPUs.

    Args:
        model: phases, stragglers, jitter and hiccups (as for the data-parallel player).
        gpus: lanes (1 to :data:`MAX_TIMELINE_GPUS`).
        layers: MoE layers each of forward and backward is split into (one all-to-all each).
        group_ranks: GPUs per expert-parallel group (consecutive GPUs, 1 to ``gpus``).
        forward_alltoall_seconds, backward_alltoall_seconds: one layer's all-to-all (dispatch
            and combine together) in the forward and in the backward pass.
        allreduce_seconds: the data-parallel gradient AllReduce at the end of the step.
        gpus_per_node: for each lane's node and the ring's hop links.
        overlapped: all-to-all on a second stream under the GEMMs, or after them.
        seed: seeds this step's jitter and hiccup draws.

    Raises:
        SimulationParameterError: naming the bad parameter.
    """
    if not 1 <= gpus <= MAX_TIMELINE_GPUS:
        raise SimulationParameterError(
            "gpus", f"the step player lays out 1 to {MAX_TIMELINE_GPUS} GPUs (got {gpus})"
        )
    if layers < 1:
        raise SimulationParameterError("moe_layers", f"must be at least 1 (got {layers})")
    if not 1 <= group_ranks <= gpus:
        raise SimulationParameterError(
            "expert_parallel_ranks", f"must be between 1 and the {gpus} GPUs (got {group_ranks})"
        )
    for name, value in (
        ("alltoall_seconds", forward_alltoall_seconds),
        ("alltoall_seconds", backward_alltoall_seconds),
        ("allreduce_seconds", allreduce_seconds),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise SimulationParameterError(name, "must be a non-negative duration")
    if seed < 0:
        raise SimulationParameterError("seed", "must be a non-negative integer")
    rng = np.random.default_rng(seed)
    jitter = jitter_factors(model, rng.standard_normal(gpus))
    hiccup = ((rng.random(gpus) < model.hiccup_probability) * model.hiccup_seconds).astype(
        np.float64
    )
    factors = model.factors(gpus)
    optimizer = model.optimizer_seconds * factors["optimizer"]
    phases = ("data_load", "forward", "backward", "other")
    plan = _Plan(
        layers=layers,
        group_ranks=group_ranks,
        alltoall=(forward_alltoall_seconds, backward_alltoall_seconds),
        allreduce_seconds=allreduce_seconds,
        overlapped=overlapped,
    )
    durations: dict[str, FloatArray] = {
        p: model.phase_seconds(p) * factors[p] * jitter for p in phases
    }
    tracks, arrival, barrier, step = _layout(durations, hiccup, optimizer, plan)
    # The ideal: every GPU at GPU 0's pace of this step, no straggler, no hiccup.
    nominal: dict[str, FloatArray] = {
        p: np.full(gpus, model.phase_seconds(p) * float(jitter[0])) for p in phases
    }
    *_, ideal = _layout(nominal, np.zeros(gpus), np.full(gpus, model.optimizer_seconds), plan)
    lanes = []
    for gpu, track in enumerate(tracks):
        waits = sum(s.seconds for s in track.segments if s.phase in ("ep_wait", "barrier_wait"))
        idle = sum(s.seconds for s in track.segments if s.phase == "idle")
        lanes.append(
            ExpertLane(
                gpu=gpu,
                node=gpu // gpus_per_node,
                local_index=gpu % gpus_per_node,
                group=gpu // group_ranks,
                segments=tuple(track.segments),
                comm_segments=tuple(track.comm),
                arrival_seconds=float(arrival[gpu]),
                wait_seconds=waits + idle,
                alltoall_hidden_seconds=track.hidden,
                alltoall_exposed_seconds=track.exposed,
                slowdown_phases=tuple(p for p, values in factors.items() if values[gpu] > 1),
            )
        )
    total = layers * (forward_alltoall_seconds + backward_alltoall_seconds)
    return ExpertTimeline(
        gpus=gpus,
        group_ranks=group_ranks,
        layers=layers,
        overlapped=overlapped,
        lanes=tuple(lanes),
        forward_alltoall_seconds=forward_alltoall_seconds,
        backward_alltoall_seconds=backward_alltoall_seconds,
        barrier_seconds=barrier,
        allreduce_seconds=allreduce_seconds,
        step_seconds=step,
        ideal_step_seconds=ideal,
        efficiency=min(1.0, ideal / step) if step > 0 else 1.0,
        barrier_wait_ratio=sum(lane.wait_seconds for lane in lanes) / (gpus * step)
        if step > 0
        else 0.0,
        alltoall_seconds=total,
        alltoall_hidden_seconds=sum(t.hidden for t in tracks) / gpus,
        alltoall_exposed_seconds=sum(t.exposed for t in tracks) / gpus,
        ring=ring_schedule(gpus, gpus_per_node),
    )
