"""The simulator's expert-parallel and pipeline-parallel cost terms at each GPU count.

:func:`parallel_terms` turns a checked request into, per GPU count, the expert all-to-all of a
step (``moe_layers`` layers, each with one all-to-all of ``alltoall_bytes`` per rank in the
forward and one in the backward pass, over ``min(expert_parallel_ranks, gpus)`` ranks), the
part of it hidden under the layer's GEMMs and the part exposed, and the pipeline bubble of
``pipeline_stages`` stages over ``microbatches`` micro-batches. The formulas and their sources
are in :mod:`hpcscope.analysis.simulate.parallelism` and ``docs/simulate.md``. With the
defaults (no all-to-all bytes, one stage) every term is 0 and the simulator is the
data-parallel one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.analysis.simulate.collectives import CollectiveModelError, Fabric
from hpcscope.analysis.simulate.parallelism import (
    alltoall_cost,
    overlap,
    pipeline_bubble_ratio,
    pipeline_bubble_seconds,
)
from hpcscope.model.nccl_latency import NcclLatencies
from hpcscope.service.simulate.inputs import SimulationInputError, SimulationRequest


@dataclass(frozen=True, slots=True)
class ParallelTerms:
    """Per GPU and step, in seconds: the expert all-to-all (kernel time, hidden, exposed) and
    the pipeline bubble; ``exposed_seconds`` is what lies on the critical path."""

    expert_parallel_ranks: int
    alltoall_layer_seconds: float
    alltoall_seconds: float
    alltoall_hidden_seconds: float
    alltoall_exposed_seconds: float
    pipeline_bubble_seconds: float
    pipeline_bubble_ratio: float

    @property
    def exposed_seconds(self) -> float:
        return self.alltoall_exposed_seconds + self.pipeline_bubble_seconds


def parallel_terms(
    counts: list[int],
    request: SimulationRequest,
    fabric: Fabric,
    latencies: NcclLatencies,
) -> dict[int, ParallelTerms]:
    """The terms at each of ``counts`` GPUs.

    Raises:
        SimulationInputError: a parameter the cost models reject.
    """
    layers = request.moe_layers
    forward_gemm = request.forward_seconds / layers
    backward_gemm = request.backward_seconds / layers
    out: dict[int, ParallelTerms] = {}
    try:
        bubble = pipeline_bubble_seconds(
            request.forward_seconds + request.backward_seconds,
            request.pipeline_stages,
            request.microbatches,
            request.virtual_stages,
        )
        ratio = pipeline_bubble_ratio(
            request.pipeline_stages, request.microbatches, request.virtual_stages
        )
        for n in counts:
            ranks = min(request.expert_parallel_ranks, n)
            layer = 0.0
            if request.alltoall_bytes > 0:
                layer = alltoall_cost(
                    request.alltoall_bytes,
                    ranks,
                    fabric,
                    latencies,
                    protocol=request.allreduce_protocol,
                ).seconds
            splits = [
                overlap(layer, gemm, overlapped=request.alltoall_overlap)
                for gemm in (forward_gemm, backward_gemm)
            ]
            out[n] = ParallelTerms(
                expert_parallel_ranks=ranks,
                alltoall_layer_seconds=layer,
                alltoall_seconds=2 * layers * layer,
                alltoall_hidden_seconds=layers * sum(s.hidden_seconds for s in splits),
                alltoall_exposed_seconds=layers * sum(s.exposed_seconds for s in splits),
                pipeline_bubble_seconds=bubble,
                pipeline_bubble_ratio=ratio,
            )
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None
    return out
