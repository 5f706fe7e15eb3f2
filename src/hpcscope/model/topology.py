"""Cluster topology: the five layers as data, loaded from YAML and validated.

A topology file describes one cluster: node groups (hosts, CPUs, GPUs, NVLink, InfiniBand HCAs),
the fabric, parallel storage, the Slurm scheduler, the software stack and where model weights
live. ``topologies/2x8-h100.yaml`` is the default (2 nodes x 8 H100 SXM); ``128x8-h100.yaml``
is for scale work.

Loading validates with pydantic and reports every problem as a :class:`TopologyError` that
names the file, the line and the field (``topologies/x.yaml:14: node_groups[0].gpu.count: ...``),
because an operator fixing a YAML file needs the line, not a Python traceback.

The parsed result is a tree of frozen dataclasses (:class:`Topology`), the type the rest of
hpcscope uses. :meth:`Topology.elements` lists every drawable element with a stable id
(``gpu-gpu01-3``) that the diagram, the element cards and the live values share.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hpcscope.model import bounded_yaml, topology_file
from hpcscope.model.bounds import read_text
from hpcscope.model.errors import TopologyError
from hpcscope.model.hostlist import HostlistError, expand_hostlist

# --------------------------------------------------------------------------------------------
# The domain types the rest of hpcscope uses.


class Layer(StrEnum):
    """The five layers of an AI training cluster, bottom to top, plus the asset they serve."""

    COMPUTE = "compute"
    INTERCONNECT = "interconnect"
    STORAGE = "storage"
    SCHEDULER = "scheduler"
    SOFTWARE = "software"
    WEIGHTS = "weights"


class ElementKind(StrEnum):
    """What an element of the diagram is; the element catalog has one card per kind."""

    NODE = "node"
    GPU = "gpu"
    NVSWITCH = "nvswitch"
    HCA = "hca"
    FABRIC = "fabric"
    STORAGE = "storage"
    SCHEDULER = "scheduler"
    SOFTWARE = "software"
    WEIGHTS = "weights"


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Static facts about one GPU model, as the twin and the cost models need them."""

    name: str
    form_factor: str
    memory_bytes: int
    sm_count: int
    max_power_watts: float
    idle_power_watts: float
    base_sm_clock_hertz: float
    max_sm_clock_hertz: float
    hbm_bandwidth_bytes_per_second: float
    peak_bf16_tensor_flops: float


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU: ``index`` is the NVML index, the dcgm-exporter ``gpu`` label."""

    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model: GpuModel

    @property
    def device(self) -> str:
        """The ``device`` label dcgm-exporter prints (``nvidia3``)."""
        return f"nvidia{self.index}"

    @property
    def element_id(self) -> str:
        return f"gpu-{self.node}-{self.index}"


@dataclass(frozen=True, slots=True)
class Hca:
    """One InfiniBand host channel adapter port, paired with the GPU it sits beside (PCIe)."""

    node: str
    device: str
    port: int
    gpu_index: int | None
    hca_type: str
    model: str
    link_layer: str
    rate_bits_per_second: float

    @property
    def element_id(self) -> str:
        return f"hca-{self.node}-{self.device}"


@dataclass(frozen=True, slots=True)
class NvlinkSpec:
    generation: int
    switch: str
    links_per_gpu: int
    bandwidth_per_direction_bytes_per_second: float
    nccl_bus_bandwidth_bytes_per_second: float


@dataclass(frozen=True, slots=True)
class Node:
    """One compute node of the cluster."""

    name: str
    group: str
    cpu_model: str
    cpu_cores: int
    memory_bytes: int
    gpus: tuple[Gpu, ...]
    hcas: tuple[Hca, ...]
    nvlink: NvlinkSpec | None

    @property
    def element_id(self) -> str:
        return f"node-{self.name}"


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    default: bool
    max_time_seconds: int | None


@dataclass(frozen=True, slots=True)
class Element:
    """A drawable, clickable part of the cluster with a stable id."""

    id: str
    kind: ElementKind
    layer: Layer
    label: str
    parent_id: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated cluster description. Build it with :func:`load_topology`."""

    name: str
    description: str
    source: str
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    gpu_hour_price: float
    currency: str
    interconnect: Mapping[str, Any]
    storage: Mapping[str, Any]
    scheduler_version: str
    slurm_cluster_name: str
    software: tuple[tuple[str, str], ...]
    checkpoint_root: str
    weight_formats: tuple[str, ...]

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(gpu for node in self.nodes for gpu in node.gpus)

    @property
    def gpu_count(self) -> int:
        return sum(len(node.gpus) for node in self.nodes)

    def node(self, name: str) -> Node:
        """The node called ``name``; KeyError if the cluster has none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def elements(self) -> Iterator[Element]:
        """Every element of the diagram, layer by layer, in a stable reading order."""
        yield Element(
            "scheduler",
            ElementKind.SCHEDULER,
            Layer.SCHEDULER,
            f"Slurm {self.scheduler_version}",
            attributes={"cluster": self.slurm_cluster_name},
        )
        yield Element(
            "software",
            ElementKind.SOFTWARE,
            Layer.SOFTWARE,
            "ML software stack",
            attributes=dict(self.software),
        )
        for node in self.nodes:
            yield Element(
                node.element_id,
                ElementKind.NODE,
                Layer.COMPUTE,
                node.name,
                attributes={"gpus": str(len(node.gpus)), "cpu": node.cpu_model},
            )
            if node.nvlink is not None:
                yield Element(
                    f"nvswitch-{node.name}",
                    ElementKind.NVSWITCH,
                    Layer.INTERCONNECT,
                    f"NVLink {node.nvlink.generation} / {node.nvlink.switch}",
                    parent_id=node.element_id,
                )
            for gpu in node.gpus:
                yield Element(
                    gpu.element_id,
                    ElementKind.GPU,
                    Layer.COMPUTE,
                    f"GPU {gpu.index}",
                    parent_id=node.element_id,
                    attributes={"model": gpu.model.name, "uuid": gpu.uuid},
                )
            for hca in node.hcas:
                yield Element(
                    hca.element_id,
                    ElementKind.HCA,
                    Layer.INTERCONNECT,
                    f"{hca.device}",
                    parent_id=node.element_id,
                    attributes={"rate": f"{hca.rate_bits_per_second / 1e9:g} Gb/s"},
                )
        yield Element(
            "fabric",
            ElementKind.FABRIC,
            Layer.INTERCONNECT,
            f"{self.interconnect['kind'].replace('infiniband', 'InfiniBand')} "
            f"{self.interconnect['generation']}",
        )
        yield Element(
            "storage",
            ElementKind.STORAGE,
            Layer.STORAGE,
            f"{self.storage['kind'].capitalize()} {self.storage['name']}",
        )
        yield Element(
            "weights",
            ElementKind.WEIGHTS,
            Layer.WEIGHTS,
            "Model weights",
            attributes={"root": self.checkpoint_root},
        )


# --------------------------------------------------------------------------------------------
# Loading with positions.

_DEFAULT_PCI_BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def _positions(
    node: yaml.Node, path: tuple[str | int, ...], out: dict[tuple[str | int, ...], int]
) -> None:
    """Map every path in the YAML document to its 1-based line."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[(*path, key)] = key_node.start_mark.line + 1
            _positions(value_node, (*path, key), out)
            # a key's own line is more useful than its value's when the value is a block
            out[(*path, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _positions(item, (*path, index), out)


def _format_path(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(document)"


def _line_for(path: Sequence[str | int], positions: Mapping[tuple[str | int, ...], int]) -> int:
    for cut in range(len(path), -1, -1):
        line = positions.get(tuple(path[:cut]))
        if line is not None:
            return line
    return 1


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    """A stable, unique ``GPU-<uuid>`` for a simulated GPU (same inputs, same UUID)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster}/{node}/{index}"))


def parse_topology(text: str, *, source: str = "<topology>") -> Topology:
    """Parse and validate topology YAML text.

    Args:
        text: the YAML document.
        source: where it came from, used in error messages.

    Returns:
        The validated topology.

    Raises:
        TopologyError: with file, line and field, for the first problem found.
    """
    try:
        document, data = bounded_yaml.compose_and_load(text, source=source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise TopologyError(
            f"not valid YAML: {exc.problem}",
            source=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:  # a character YAML refuses (ReaderError): no mark, a position
        raise TopologyError(f"not valid YAML: {exc}", source=source) from None
    if document is None or not isinstance(data, dict):
        raise TopologyError("expected a mapping at the top of the file", source=source, line=1)
    positions: dict[tuple[str | int, ...], int] = {}
    _positions(document, (), positions)
    try:
        spec = topology_file.TopologyFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = [part for part in first["loc"] if isinstance(part, str | int)]
        raise TopologyError(
            first["msg"],
            source=source,
            line=_line_for(path, positions),
            field=_format_path(path),
        ) from None
    return _build(spec, source=source, positions=positions)


def _build(
    spec: topology_file.TopologyFile, *, source: str, positions: Mapping[tuple[str | int, ...], int]
) -> Topology:
    nodes: list[Node] = []
    seen: set[str] = set()
    for group_index, group in enumerate(spec.node_groups):
        where: tuple[str | int, ...] = ("node_groups", group_index, "hostnames")
        try:
            hostnames = expand_hostlist(group.hostnames)
        except HostlistError as exc:
            raise TopologyError(
                str(exc), source=source, line=_line_for(where, positions), field=_format_path(where)
            ) from None
        if not hostnames:
            raise TopologyError(
                "no hosts",
                source=source,
                line=_line_for(where, positions),
                field=_format_path(where),
            )
        bus_ids = group.gpu.pci_bus_ids or [
            f"00000000:{_DEFAULT_PCI_BUS_IDS[i % 8]}:00.0" if i < 8 else f"00000000:{i:02x}:00.0"
            for i in range(group.gpu.count)
        ]
        if len(bus_ids) != group.gpu.count:
            where = ("node_groups", group_index, "gpu", "pci_bus_ids")
            raise TopologyError(
                f"{len(bus_ids)} PCI bus ids for {group.gpu.count} GPUs",
                source=source,
                line=_line_for(where, positions),
                field=_format_path(where),
            )
        model = GpuModel(
            name=group.gpu.model,
            form_factor=group.gpu.form_factor,
            memory_bytes=group.gpu.memory_bytes,
            sm_count=group.gpu.sm_count,
            max_power_watts=group.gpu.max_power_watts,
            idle_power_watts=group.gpu.idle_power_watts,
            base_sm_clock_hertz=group.gpu.base_sm_clock_hertz,
            max_sm_clock_hertz=group.gpu.max_sm_clock_hertz,
            hbm_bandwidth_bytes_per_second=group.gpu.hbm_bandwidth_bytes_per_second,
            peak_bf16_tensor_flops=group.gpu.peak_bf16_tensor_flops,
        )
        nvlink = NvlinkSpec(**group.nvlink.model_dump()) if group.nvlink is not None else None
        for host in hostnames:
            if host in seen:
                raise TopologyError(
                    f"host {host!r} appears twice",
                    source=source,
                    line=_line_for(where, positions),
                    field=_format_path(where),
                )
            seen.add(host)
            gpus = tuple(
                Gpu(
                    node=host,
                    index=i,
                    uuid=gpu_uuid(spec.name, host, i),
                    pci_bus_id=bus_ids[i],
                    model=model,
                )
                for i in range(group.gpu.count)
            )
            hcas: tuple[Hca, ...] = ()
            if group.hcas is not None:
                hcas = tuple(
                    Hca(
                        node=host,
                        device=f"{group.hcas.device_prefix}{i}",
                        port=1,
                        gpu_index=i if i < group.gpu.count else None,
                        hca_type=group.hcas.hca_type,
                        model=group.hcas.model,
                        link_layer=group.hcas.link_layer,
                        rate_bits_per_second=group.hcas.rate_bits_per_second,
                    )
                    for i in range(group.hcas.count)
                )
            nodes.append(
                Node(
                    name=host,
                    group=group.name,
                    cpu_model=group.cpu.model,
                    cpu_cores=group.cpu.sockets * group.cpu.cores_per_socket,
                    memory_bytes=group.memory_bytes,
                    gpus=gpus,
                    hcas=hcas,
                    nvlink=nvlink,
                )
            )
    partitions: list[Partition] = []
    for index, part in enumerate(spec.scheduler.partitions):
        where = ("scheduler", "partitions", index, "nodes")
        try:
            members = expand_hostlist(part.nodes)
        except HostlistError as exc:
            raise TopologyError(
                str(exc), source=source, line=_line_for(where, positions), field=_format_path(where)
            ) from None
        unknown = [host for host in members if host not in seen]
        if unknown:
            raise TopologyError(
                f"partition {part.name!r} names hosts that no node group has: "
                f"{', '.join(unknown[:5])}",
                source=source,
                line=_line_for(where, positions),
                field=_format_path(where),
            )
        partitions.append(Partition(part.name, tuple(members), part.default, part.max_time_seconds))
    return Topology(
        name=spec.name,
        description=spec.description,
        source=source,
        nodes=tuple(nodes),
        partitions=tuple(partitions),
        gpu_hour_price=spec.pricing.gpu_hour,
        currency=spec.pricing.currency,
        interconnect=spec.interconnect.model_dump(),
        storage=spec.storage.model_dump(),
        scheduler_version=spec.scheduler.version,
        slurm_cluster_name=spec.scheduler.cluster_name,
        software=tuple((item.name, item.version) for item in spec.software),
        checkpoint_root=spec.model_weights.checkpoint_root,
        weight_formats=tuple(spec.model_weights.formats),
    )


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file.

    Raises:
        TopologyError: unreadable file, bad YAML or an invalid field (with file and line).
    """
    return parse_topology(read_text(path, error=TopologyError), source=str(path))
