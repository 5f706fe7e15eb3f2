"""Cost terms of expert and pipeline parallelism: the all-to-all and the pipeline bubble.

Formulas and their public sources (``docs/simulate.md`` has the worked figures):

* **All-to-all** (expert dispatch and combine): each of ``n`` ranks holds a buffer of ``S``
  bytes, split into ``n`` equal parts, one for each rank (itself included); it sends the
  ``n - 1`` foreign parts and receives as many. nccl-tests (``src/alltoall.cu``,
  ``AlltoAllGetBw``; ``doc/PERFORMANCE.md``) reports ``algbw = S / t`` and
  ``busbw = algbw · (n-1)/n``, so on a link of bandwidth ``B`` per rank and per direction
  ``T = (n-1)/n · S / B + latency``. On several nodes of ``g`` GPUs, ``(g-1)/n · S`` leaves
  over NVLink and ``(n-g)/n · S`` over the node's NICs, shared by its ``g`` GPUs
  (``nics_per_node · B_nic / g`` each); both links work at once, so the bandwidth term is the
  larger of the two. NCCL runs an all-to-all as one group of send/recv pairs (nccl-tests
  ``AlltoAllRunColl``): the latency is one operation's base plus one hop of the slowest link
  crossed (NCCL's latency table, ``src/graph/tuning.cc``).
* **Pipeline bubble**: with ``p`` stages and ``m`` micro-batches per step, GPipe (Huang et al.,
  2019) and 1F1B leave each stage idle for ``(p-1)`` micro-batch forward and backward times per
  step; relative to the ideal compute ``t_id`` that is ``t_pb / t_id = (p-1)/m``, and with the
  interleaved schedule of ``v`` model chunks per stage ``(p-1)/(v·m)`` (Narayanan et al., 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", §2.2).
  The bubble's share of the step is then ``(p-1)/(v·m + p - 1)``.
* **Overlap**: an all-to-all issued on a second stream while the GEMMs of another micro-batch
  run (DeepEP, DeepSeek-V3's dual micro-batch overlap) is hidden up to the length of those
  GEMMs; the rest, ``max(0, T_a2a - T_gemm)`` per layer, is exposed on the critical path.
  Without overlap the whole all-to-all is exposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcscope.analysis.simulate.collectives import CollectiveModelError, Fabric
from hpcscope.model.nccl_latency import NcclLatencies, Protocol


@dataclass(frozen=True, slots=True)
class AllToAllCost:
    """One all-to-all, broken down. Times in seconds; ``message_bytes`` is one rank's whole
    send buffer (nccl-tests' size), ``intra_seconds`` / ``inter_seconds`` the NVLink and NIC
    bandwidth terms."""

    ranks: int
    nodes: int
    gpus_per_node: int
    message_bytes: float
    bandwidth_seconds: float
    latency_seconds: float
    intra_seconds: float
    inter_seconds: float

    @property
    def seconds(self) -> float:
        return self.bandwidth_seconds + self.latency_seconds

    @property
    def bus_bandwidth_bytes_per_second(self) -> float:
        """nccl-tests' busbw for this time: ``S/t · (n-1)/n`` (0 for one rank)."""
        if self.ranks < 2 or self.seconds <= 0:
            return 0.0
        return self.message_bytes / self.seconds * (self.ranks - 1) / self.ranks


def alltoall_cost(
    message_bytes: float,
    ranks: int,
    fabric: Fabric,
    latencies: NcclLatencies,
    *,
    protocol: Protocol = "Simple",
) -> AllToAllCost:
    """Time of an all-to-all of ``message_bytes`` per rank over ``ranks`` ranks.

    Ranks are packed onto ``ceil(ranks / gpus_per_node)`` full nodes, as for the AllReduce.

    Raises:
        CollectiveModelError: fewer than one rank, negative bytes, or several nodes without NICs.
    """
    if ranks < 1:
        raise CollectiveModelError("expert_parallel_ranks", "must be at least 1")
    if not (math.isfinite(message_bytes) and message_bytes >= 0):
        raise CollectiveModelError("alltoall_bytes", "must be a non-negative number of bytes")
    per_node = min(ranks, fabric.gpus_per_node)
    nodes = math.ceil(ranks / per_node)
    if nodes > 1 and fabric.nics_per_node == 0:
        raise CollectiveModelError(
            "nics_per_node", f"{ranks} ranks need {nodes} nodes, but the nodes have no NIC"
        )
    if ranks == 1:
        return AllToAllCost(1, 1, 1, float(message_bytes), 0.0, 0.0, 0.0, 0.0)
    intra = (per_node - 1) / ranks * message_bytes / fabric.intra_bytes_per_second
    inter = 0.0
    link = fabric.intra_link
    if nodes > 1:
        per_gpu_nic = fabric.nics_per_node * fabric.nic_bytes_per_second / per_node
        inter = (ranks - per_node) / ranks * message_bytes / per_gpu_nic
        link = "network"
    latency = latencies.base_seconds("ring", protocol) + latencies.hop_seconds(
        link, "ring", protocol
    )
    return AllToAllCost(
        ranks=ranks,
        nodes=nodes,
        gpus_per_node=per_node,
        message_bytes=float(message_bytes),
        bandwidth_seconds=max(intra, inter),
        latency_seconds=latency,
        intra_seconds=intra,
        inter_seconds=inter,
    )


def _check_pipeline(stages: int, microbatches: int, virtual_stages: int) -> None:
    if stages < 1:
        raise CollectiveModelError("pipeline_stages", "must be at least 1")
    if microbatches < 1:
        raise CollectiveModelError("microbatches", "must be at least 1")
    if virtual_stages < 1:
        raise CollectiveModelError("virtual_stages", "must be at least 1")


def pipeline_bubble_ratio(stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Share of a pipelined step spent in the bubble: ``(p-1)/(v·m + p - 1)`` (0 for 1 stage)."""
    _check_pipeline(stages, microbatches, virtual_stages)
    return (stages - 1) / (virtual_stages * microbatches + stages - 1)


def pipeline_bubble_seconds(
    compute_seconds: float, stages: int, microbatches: int, virtual_stages: int = 1
) -> float:
    """Idle time a stage adds to ``compute_seconds`` (its forward and backward over the
    step's ``m`` micro-batches): ``(p-1)/(v·m) · compute_seconds``."""
    _check_pipeline(stages, microbatches, virtual_stages)
    if not (math.isfinite(compute_seconds) and compute_seconds >= 0):
        raise CollectiveModelError("compute_seconds", "must be a non-negative duration")
    return (stages - 1) / (virtual_stages * microbatches) * compute_seconds


@dataclass(frozen=True, slots=True)
class Overlap:
    """How much of a communication of ``comm_seconds`` hides under ``compute_seconds``."""

    hidden_seconds: float
    exposed_seconds: float


def overlap(comm_seconds: float, compute_seconds: float, *, overlapped: bool) -> Overlap:
    """Split one layer's communication into the part hidden under its GEMMs (on a second
    stream) and the part exposed on the critical path: ``min(c, g)`` and ``max(0, c - g)``
    when overlapped, ``0`` and ``c`` when not."""
    if not (math.isfinite(comm_seconds) and comm_seconds >= 0):
        raise CollectiveModelError("alltoall_seconds", "must be a non-negative duration")
    if not (math.isfinite(compute_seconds) and compute_seconds >= 0):
        raise CollectiveModelError("compute_seconds", "must be a non-negative duration")
    if not overlapped:
        return Overlap(0.0, comm_seconds)
    hidden = min(comm_seconds, compute_seconds)
    return Overlap(hidden, comm_seconds - hidden)
