"""The step player's expert mode: one MoE step of the cluster with an overlapped all-to-all.

:func:`expert_player` models one MoE layer's all-to-all (dispatch and combine) among the expert
group on the topology's fabric (:func:`~hpcscope.analysis.simulate.parallelism.alltoall_cost`),
lays out the step healthy and with the straggler, with the same seed
(:func:`~hpcscope.analysis.simulate.expert_timeline.expert_step_timeline`), and shapes it for the
player and ``GET /api/step/expert`` (schema in ``docs/simulate.md``). It reads only the topology.
"""

from __future__ import annotations

import dataclasses

from hpcscope.analysis.simulate.collectives import CollectiveModelError
from hpcscope.analysis.simulate.expert_timeline import ExpertTimeline, expert_step_timeline
from hpcscope.analysis.simulate.parallelism import alltoall_cost
from hpcscope.analysis.simulate.step_model import StepModel, Straggler
from hpcscope.analysis.simulate.step_timeline import MAX_TIMELINE_GPUS, Segment
from hpcscope.model.nccl_latency import NcclLatencies, default_nccl_latencies
from hpcscope.model.topology import Topology
from hpcscope.service.simulate.contracts import ExpertScenario, ExpertStepPlayer
from hpcscope.service.simulate.inputs import (
    ExpertStepRequest,
    SimulationInputError,
    allreduce_costs,
    fabric_for,
    model_input_errors,
)
from hpcscope.service.simulate.step_player import allreduce_and_ring_json


def expert_player(
    request: ExpertStepRequest, topology: Topology, *, latencies: NcclLatencies | None = None
) -> ExpertStepPlayer:
    """One MoE step of the whole cluster, healthy and with the straggler.

    Raises:
        SimulationInputError: a bad parameter (a straggler GPU or an expert group the cluster
            does not have).
    """
    gpus = topology.gpu_count
    if not 1 <= gpus <= MAX_TIMELINE_GPUS:
        raise SimulationInputError(
            "topology", f"the step player lays out 1 to {MAX_TIMELINE_GPUS} GPUs, not {gpus}"
        )
    if request.straggler_gpu >= gpus:
        raise SimulationInputError(
            "straggler_gpu", f"the cluster has GPUs 0 to {gpus - 1} (got {request.straggler_gpu})"
        )
    ranks = request.expert_parallel_ranks or gpus
    if ranks > gpus or gpus % ranks:
        raise SimulationInputError(
            "expert_parallel_ranks",
            f"expert groups must divide the cluster's {gpus} GPUs (got {ranks})",
        )
    latencies = latencies or default_nccl_latencies()
    fabric = fabric_for(topology, request)
    try:
        a2a = alltoall_cost(
            request.alltoall_bytes, ranks, fabric, latencies, protocol=request.allreduce_protocol
        )
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None
    cost = allreduce_costs([gpus], request, request.allreduce_algorithm, fabric, latencies)[gpus]
    with model_input_errors():
        healthy_model = StepModel(
            data_load_seconds=request.data_load_seconds,
            forward_seconds=request.forward_seconds,
            backward_seconds=request.backward_seconds,
            other_seconds=request.other_seconds,
            optimizer_seconds=request.optimizer_seconds,
            jitter_cv=request.jitter_cv,
            jitter_distribution=request.jitter_distribution,
        )
        slow_model = dataclasses.replace(
            healthy_model,
            stragglers=(
                Straggler(request.straggler_gpu, request.straggler_phase, request.straggler_factor),
            ),
        )
        timelines = {
            name: expert_step_timeline(
                model,
                gpus,
                layers=request.moe_layers,
                group_ranks=ranks,
                forward_alltoall_seconds=a2a.seconds,
                backward_alltoall_seconds=a2a.seconds,
                allreduce_seconds=cost.seconds,
                gpus_per_node=fabric.gpus_per_node,
                overlapped=request.alltoall_overlap,
                seed=request.seed,
            )
            for name, model in (("healthy", healthy_model), ("straggler", slow_model))
        }
    ring = timelines["healthy"].ring
    return ExpertStepPlayer.model_validate(
        {
            "parameters": request,
            "cluster": {
                "name": topology.name,
                "gpus": gpus,
                "gpus_per_node": fabric.gpus_per_node,
                "nodes": [node.name for node in topology.nodes],
                "labels": [f"{gpu.node} · GPU {gpu.index}" for gpu in topology.gpus],
            },
            "alltoall": {
                "ranks": a2a.ranks,
                "nodes": a2a.nodes,
                "layers": request.moe_layers,
                "message_bytes": a2a.message_bytes,
                "seconds_per_layer": a2a.seconds,
                "bandwidth_seconds": a2a.bandwidth_seconds,
                "latency_seconds": a2a.latency_seconds,
                "intra_seconds": a2a.intra_seconds,
                "inter_seconds": a2a.inter_seconds,
                "bus_bandwidth_bytes_per_second": a2a.bus_bandwidth_bytes_per_second,
                "overlapped": request.alltoall_overlap,
            },
            **allreduce_and_ring_json(cost, ring),
            "healthy": expert_json(timelines["healthy"]),
            "straggler": expert_json(timelines["straggler"]),
        }
    )


def _segments(segments: tuple[Segment, ...]) -> list[dict[str, object]]:
    return [
        {"phase": s.phase, "start_seconds": s.start_seconds, "end_seconds": s.end_seconds}
        for s in segments
    ]


def expert_json(timeline: ExpertTimeline) -> ExpertScenario:
    """One scenario of the expert mode: its totals and its lanes (both streams)."""
    total = timeline.alltoall_seconds
    return ExpertScenario.model_validate(
        {
            "step_seconds": timeline.step_seconds,
            "ideal_step_seconds": timeline.ideal_step_seconds,
            "barrier_seconds": timeline.barrier_seconds,
            "allreduce_seconds": timeline.allreduce_seconds,
            "efficiency": timeline.efficiency,
            "barrier_wait_ratio": timeline.barrier_wait_ratio,
            "alltoall_seconds": total,
            "alltoall_hidden_seconds": timeline.alltoall_hidden_seconds,
            "alltoall_exposed_seconds": timeline.alltoall_exposed_seconds,
            "alltoall_hidden_ratio": timeline.alltoall_hidden_seconds / total if total else 0.0,
            "lanes": [
                {
                    "gpu": lane.gpu,
                    "node": lane.node,
                    "local_index": lane.local_index,
                    "group": lane.group,
                    "arrival_seconds": lane.arrival_seconds,
                    "wait_seconds": lane.wait_seconds,
                    "slowdown_phases": list(lane.slowdown_phases),
                    "segments": _segments(lane.segments),
                    "comm_segments": _segments(lane.comm_segments),
                    "alltoall_hidden_seconds": lane.alltoall_hidden_seconds,
                    "alltoall_exposed_seconds": lane.alltoall_exposed_seconds,
                }
                for lane in timeline.lanes
            ],
        }
    )
