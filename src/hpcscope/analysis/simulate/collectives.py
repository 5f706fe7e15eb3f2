"""AllReduce cost models: how long the gradient AllReduce of one step takes on a cluster.

α–β (Hockney) models with NCCL's own latency figures, after Thakur, Rabenseifner and Gropp
(2005) and ``NVIDIA/nccl src/graph/tuning.cc``. ``S`` bytes, ``n`` ranks on ``N`` nodes of
``g`` GPUs, ``B`` a bandwidth **per rank and per direction** (never the bidirectional
headline: NVLink 4 is 900 GB/s both ways, 450 GB/s each way, and NCCL sees 370.8 GB/s):

* ``ring``: one flat ring over all ranks. ``T = lat + 2(n-1)/n · S/B`` with
  ``B = min(B_intra, nics_per_node · B_nic)`` once the ring leaves the node, and NCCL's ring
  latency ``base + (2(n-1) - 2N)·hop_intra + 2N·hop_network``. At many nodes the latency term
  (2(n-1) steps) dominates; that is why NCCL switches to trees.
* ``two-level`` (default): reduce inside each node over NVLink, then ``g`` rail-parallel
  reductions of ``S/g`` between nodes (one NIC per GPU), then broadcast inside the node.
  ``T_intra = 2(g-1)/g · S/B_intra``, ``T_inter = 2(N-1)/N · S/(nics_per_node · B_nic)``.
  NCCL pipelines chunks through both stages, so the time is ``max(T_intra, T_inter)`` plus the
  latencies of an intra-node ring and of an inter-node tree (``2·ceil(log2 N)`` network hops).
  Validated against nccl-tests: 8 GiB on 2 x 8 H100 (GCP A3 Mega, 8 x 200 Gb/s) measured
  47.5 ms, this model 43.0 ms (see ``docs/simulate.md``).
* ``two-level-sum``: the same stages without pipelining, ``T_intra + T_inter``: an upper bound
  (83.5 ms on that validation point, far too high for NCCL; kept to show the spread).

Gradient buckets (PyTorch DDP, 25 MiB by default) turn one AllReduce into several: each bucket
pays the latency, the bandwidth term is paid once for all bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hpcscope.model.errors import InputError
from hpcscope.model.nccl_latency import Link, NcclLatencies, Protocol
from hpcscope.model.topology import Topology

AllReduceAlgorithm = Literal["ring", "two-level", "two-level-sum"]
ALLREDUCE_ALGORITHMS: tuple[AllReduceAlgorithm, ...] = ("ring", "two-level", "two-level-sum")

#: Bytes per gradient element, by training precision.
PRECISION_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

#: PCIe Gen5 x16 as NCCL models it (48 GB/s per direction), used inside nodes without NVLink.
PCIE_GEN5_BYTES_PER_SECOND = 48e9


class CollectiveModelError(InputError, ValueError):
    """Parameters a cost model cannot use (no NIC between nodes, zero bandwidth, ...)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class Fabric:
    """What the AllReduce cost models need to know about a cluster.

    Attributes:
        gpus_per_node: ranks that share one node (and its NVLink domain).
        intra_bytes_per_second: per-GPU, per-direction bandwidth inside a node as NCCL sees it
            (370.8e9 for NVLink 4 on H100 SXM).
        intra_link: ``nvlink`` or ``pci``, selects the hop latency row.
        nic_bytes_per_second: per-NIC, per-direction line rate between nodes (NDR: 50e9).
        nics_per_node: NICs usable for inter-node traffic in one node.
    """

    gpus_per_node: int
    intra_bytes_per_second: float
    intra_link: Link
    nic_bytes_per_second: float
    nics_per_node: int

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise CollectiveModelError("gpus_per_node", "must be at least 1")
        if not self.intra_bytes_per_second > 0:
            raise CollectiveModelError("intra_bytes_per_second", "must be positive")
        if self.nics_per_node < 0:
            raise CollectiveModelError("nics_per_node", "cannot be negative")
        if self.nics_per_node > 0 and not self.nic_bytes_per_second > 0:
            raise CollectiveModelError("nic_bytes_per_second", "must be positive")

    @classmethod
    def from_topology(
        cls,
        topology: Topology,
        *,
        nic_bytes_per_second: float | None = None,
        intra_bytes_per_second: float | None = None,
    ) -> Fabric:
        """Derive the fabric from the first node of a topology.

        The NIC bandwidth is the HCA line rate in bytes (400 Gb/s -> 50 GB/s) unless given;
        the intra-node bandwidth is NVLink as NCCL sees it, or PCIe Gen5 without NVLink.
        """
        node = topology.nodes[0]
        gpus = max(1, len(node.gpus))
        if node.nvlink is not None:
            intra = node.nvlink.nccl_bus_bandwidth_bytes_per_second
            link: Link = "nvlink"
        else:
            intra = PCIE_GEN5_BYTES_PER_SECOND
            link = "pci"
        nics = len(node.hcas)
        nic = node.hcas[0].rate_bits_per_second / 8 if node.hcas else 0.0
        return cls(
            gpus_per_node=gpus,
            intra_bytes_per_second=intra_bytes_per_second or intra,
            intra_link=link,
            nic_bytes_per_second=nic_bytes_per_second or nic,
            nics_per_node=nics,
        )


@dataclass(frozen=True, slots=True)
class AllReduceCost:
    """One AllReduce, broken down. Times in seconds.

    ``intra_seconds`` / ``inter_seconds`` are the bandwidth terms of the two stages (for a flat
    ring, ``intra_seconds`` holds the whole bandwidth term and ``inter_seconds`` is 0).
    """

    algorithm: AllReduceAlgorithm
    protocol: Protocol
    gpus: int
    nodes: int
    gpus_per_node: int
    message_bytes: float
    buckets: int
    bandwidth_seconds: float
    latency_seconds: float
    intra_seconds: float
    inter_seconds: float

    @property
    def seconds(self) -> float:
        return self.bandwidth_seconds + self.latency_seconds

    @property
    def bus_bandwidth_bytes_per_second(self) -> float:
        """nccl-tests' busbw for this time: ``S/t · 2(n-1)/n`` (0 for one rank)."""
        if self.gpus < 2 or self.seconds <= 0:
            return 0.0
        return self.message_bytes / self.seconds * 2 * (self.gpus - 1) / self.gpus


def gradient_bytes(parameters: float, precision: str = "bf16") -> float:
    """Bytes of one full gradient: parameters x bytes per element of ``precision``."""
    if parameters < 0:
        raise CollectiveModelError("model_parameters", "cannot be negative")
    try:
        return parameters * PRECISION_BYTES[precision]
    except KeyError:
        raise CollectiveModelError(
            "precision", f"unknown precision {precision!r} (one of {', '.join(PRECISION_BYTES)})"
        ) from None


def _layout(gpus: int, fabric: Fabric) -> tuple[int, int]:
    """(nodes, ranks per node) for ``gpus`` ranks packed onto full nodes."""
    per_node = min(gpus, fabric.gpus_per_node)
    return math.ceil(gpus / per_node), per_node


def allreduce_cost(
    message_bytes: float,
    gpus: int,
    fabric: Fabric,
    latencies: NcclLatencies,
    *,
    algorithm: AllReduceAlgorithm = "two-level",
    protocol: Protocol = "Simple",
    buckets: int = 1,
) -> AllReduceCost:
    """Time of an AllReduce of ``message_bytes`` over ``gpus`` ranks.

    Args:
        message_bytes: the whole gradient (all buckets together).
        gpus: ranks taking part; packed onto ``ceil(gpus / gpus_per_node)`` nodes.
        fabric: bandwidths and NICs (see :class:`Fabric`).
        latencies: NCCL's latency table (``hpcscope.model.nccl_latency``).
        algorithm: ``ring``, ``two-level`` (pipelined) or ``two-level-sum``.
        protocol: NCCL protocol whose latencies apply (``Simple`` for large gradients).
        buckets: collectives the gradient is split into; each pays the latency once.

    Raises:
        CollectiveModelError: fewer than one GPU, negative bytes, or several nodes without NICs.
    """
    if gpus < 1:
        raise CollectiveModelError("gpus", "must be at least 1")
    if message_bytes < 0:
        raise CollectiveModelError("message_bytes", "cannot be negative")
    if buckets < 1:
        raise CollectiveModelError("buckets", "must be at least 1")
    nodes, per_node = _layout(gpus, fabric)
    if nodes > 1 and fabric.nics_per_node == 0:
        raise CollectiveModelError(
            "nics_per_node", f"{gpus} GPUs need {nodes} nodes, but the nodes have no NIC"
        )

    def cost(bandwidth: float, latency: float, intra: float, inter: float) -> AllReduceCost:
        return AllReduceCost(
            algorithm=algorithm,
            protocol=protocol,
            gpus=gpus,
            nodes=nodes,
            gpus_per_node=per_node,
            message_bytes=float(message_bytes),
            buckets=buckets,
            bandwidth_seconds=bandwidth,
            latency_seconds=latency * buckets,
            intra_seconds=intra,
            inter_seconds=inter,
        )

    if gpus == 1:
        return cost(0.0, 0.0, 0.0, 0.0)
    intra_hop = latencies.hop_seconds(fabric.intra_link, "ring", protocol)
    net_hop = latencies.hop_seconds("network", "ring", protocol)
    base = latencies.base_seconds("ring", protocol)
    if algorithm == "ring":
        bandwidth = fabric.intra_bytes_per_second
        if nodes > 1:
            bandwidth = min(bandwidth, fabric.nics_per_node * fabric.nic_bytes_per_second)
        steps = 2 * (gpus - 1)
        inter_steps = 2 * nodes if nodes > 1 else 0
        latency = base + (steps - inter_steps) * intra_hop + inter_steps * net_hop
        term = steps / gpus * message_bytes / bandwidth
        return cost(term, latency, term, 0.0)
    t_intra = 2 * (per_node - 1) / per_node * message_bytes / fabric.intra_bytes_per_second
    t_inter = 0.0
    latency = base + 2 * (per_node - 1) * intra_hop if per_node > 1 else 0.0
    if nodes > 1:
        rails_bandwidth = fabric.nics_per_node * fabric.nic_bytes_per_second
        t_inter = 2 * (nodes - 1) / nodes * message_bytes / rails_bandwidth
        latency += 2 * math.ceil(math.log2(nodes)) * net_hop
    bandwidth_term = max(t_intra, t_inter) if algorithm == "two-level" else t_intra + t_inter
    return cost(bandwidth_term, latency, t_intra, t_inter)


def message_bytes_for(
    seconds: float,
    gpus: int,
    fabric: Fabric,
    latencies: NcclLatencies,
    *,
    algorithm: AllReduceAlgorithm = "two-level",
    protocol: Protocol = "Simple",
    buckets: int = 1,
) -> float:
    """The message size whose modelled AllReduce over ``gpus`` ranks takes ``seconds``.

    Every model is ``latency + slope · S`` for a given rank count, so the answer is exact:
    ``(seconds - latency) / slope``, and 0 when ``seconds`` is below the latency alone.
    Used to anchor the model on a measured collective time.

    Raises:
        CollectiveModelError: ``gpus`` is 1 (no AllReduce to anchor on) or ``seconds`` < 0.
    """
    if gpus < 2:
        raise CollectiveModelError("gpus", "one rank has no AllReduce to calibrate from")
    if not (math.isfinite(seconds) and seconds >= 0):
        raise CollectiveModelError("seconds", f"not a duration ({seconds})")

    def model(message_bytes: float) -> float:
        return allreduce_cost(
            message_bytes,
            gpus,
            fabric,
            latencies,
            algorithm=algorithm,
            protocol=protocol,
            buckets=buckets,
        ).seconds

    floor = model(0.0)
    probe = 1e9
    slope = (model(probe) - floor) / probe
    return max(0.0, (seconds - floor) / slope)
