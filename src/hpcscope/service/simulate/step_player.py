"""The step player's data: one training step of the whole cluster, GPU by GPU, as JSON.

:func:`step_player` lays out one step of the topology's GPUs twice with the same seed, healthy
and with one straggler (:func:`~hpcscope.analysis.simulate.step_timeline.step_timeline`), with the
ring AllReduce modelled on the topology's fabric, and shapes it for ``/step`` and its JSON twin
``GET /api/step`` (schema in ``docs/simulate.md``). It reads only the topology, never job data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

from hpcscope.analysis.simulate.collectives import AllReduceCost
from hpcscope.analysis.simulate.step_model import StepModel, Straggler
from hpcscope.analysis.simulate.step_timeline import (
    MAX_TIMELINE_GPUS,
    RingSchedule,
    StepTimeline,
    step_timeline,
)
from hpcscope.model.nccl_latency import NcclLatencies, default_nccl_latencies
from hpcscope.model.topology import Topology
from hpcscope.service.simulate.contracts import StepPlayer, StepScenario
from hpcscope.service.simulate.inputs import (
    SimulationInputError,
    StepRequest,
    allreduce_costs,
    fabric_for,
    model_input_errors,
)


def step_player(
    request: StepRequest, topology: Topology, *, latencies: NcclLatencies | None = None
) -> StepPlayer:
    """One step of the whole cluster, healthy and with the straggler, as the player draws it.

    Both scenarios share the seed, so the only difference between them is the straggler.

    Raises:
        SimulationInputError: a bad parameter (e.g. a straggler GPU the cluster does not have).
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
    latencies = latencies or default_nccl_latencies()
    fabric = fabric_for(topology, request)
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
        per_node = fabric.gpus_per_node
        timelines = {
            name: step_timeline(
                m, gpus, allreduce_seconds=cost.seconds, gpus_per_node=per_node, seed=request.seed
            )
            for name, m in (("healthy", healthy_model), ("straggler", slow_model))
        }
    labels = [f"{gpu.node} · GPU {gpu.index}" for gpu in topology.gpus]
    ring = timelines["healthy"].ring
    return StepPlayer.model_validate(
        {
            "parameters": request,
            "cluster": {
                "name": topology.name,
                "gpus": gpus,
                "gpus_per_node": per_node,
                "nodes": [node.name for node in topology.nodes],
                "labels": labels,
            },
            **allreduce_and_ring_json(cost, ring),
            "healthy": timeline_json(timelines["healthy"]),
            "straggler": timeline_json(timelines["straggler"]),
        }
    )


def allreduce_and_ring_json(cost: AllReduceCost, ring: RingSchedule) -> dict[str, object]:
    """The ``allreduce`` and ``ring`` sections every step player sends (plain and expert)."""
    return {
        "allreduce": {
            "algorithm": cost.algorithm,
            "protocol": cost.protocol,
            "seconds": cost.seconds,
            "bandwidth_seconds": cost.bandwidth_seconds,
            "latency_seconds": cost.latency_seconds,
            "message_bytes": cost.message_bytes,
            "bus_bandwidth_bytes_per_second": cost.bus_bandwidth_bytes_per_second,
            "ring_steps": ring.steps,
            "seconds_per_ring_step": cost.seconds / ring.steps if ring.steps else 0.0,
        },
        "ring": {
            "hops": [asdict(hop) for hop in ring.hops],
            "transfers": [[t.step, t.source, t.target, t.chunk] for t in ring.transfers],
            "transfer_columns": ["step", "source", "target", "chunk"],
            "reduce_scatter_steps": ring.gpus - 1,
        },
    }


def timeline_json(timeline: StepTimeline) -> StepScenario:
    """One scenario of the player (``healthy`` or ``straggler``): its totals and its lanes."""
    return StepScenario.model_validate(
        {
            "step_seconds": timeline.step_seconds,
            "ideal_step_seconds": timeline.ideal_step_seconds,
            "barrier_seconds": timeline.barrier_seconds,
            "allreduce_seconds": timeline.allreduce_seconds,
            "efficiency": timeline.efficiency,
            "barrier_wait_ratio": timeline.barrier_wait_ratio,
            "lanes": [
                {
                    "gpu": lane.gpu,
                    "node": lane.node,
                    "local_index": lane.local_index,
                    "arrival_seconds": lane.arrival_seconds,
                    "wait_seconds": lane.wait_seconds,
                    "slowdown_phases": list(lane.slowdown_phases),
                    "segments": [
                        {
                            "phase": s.phase,
                            "start_seconds": s.start_seconds,
                            "end_seconds": s.end_seconds,
                        }
                        for s in lane.segments
                    ],
                }
                for lane in timeline.lanes
            ],
        }
    )
