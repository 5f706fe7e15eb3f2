"""The topology file's schema: what a topology YAML may say, validated with pydantic.

These models exist only at the edge (parsing a file); :mod:`hpcscope.model.topology` turns a
validated file into the frozen dataclasses the rest of hpcscope uses. Sizes and rates may be
written for humans (``80GiB``, ``400Gb/s``) and are converted to base units here.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

# --------------------------------------------------------------------------------------------
# Sizes and rates written for humans ("80 GiB", "400 Gb/s") become base units (bytes, bits/s).

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_RATE_UNITS = {
    "": 1.0,
    "b/s": 1.0,
    "bps": 1.0,
    "kb/s": 1e3,
    "mb/s": 1e6,
    "gb/s": 1e9,
    "tb/s": 1e12,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
}


def _parse_bytes(value: object) -> object:
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _BYTE_UNITS:
            raise ValueError(f"not a size: {value!r} (write e.g. 80GiB, 2TiB or a byte count)")
        return round(float(match.group(1)) * _BYTE_UNITS[unit])
    return value


def _parse_bits_per_second(value: object) -> object:
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _RATE_UNITS:
            raise ValueError(f"not a bit rate: {value!r} (write e.g. 400Gb/s)")
        return float(match.group(1)) * _RATE_UNITS[unit]
    return value


Bytes = Annotated[int, BeforeValidator(_parse_bytes), Field(gt=0)]
BitsPerSecond = Annotated[float, BeforeValidator(_parse_bits_per_second), Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuSpec(Strict):
    model: str
    sockets: int = Field(ge=1)
    cores_per_socket: int = Field(ge=1)


class GpuSpec(Strict):
    model: str
    form_factor: str = "SXM5"
    count: int = Field(ge=0, le=64)
    memory_bytes: Bytes
    sm_count: int = Field(ge=1)
    max_power_watts: float = Field(gt=0)
    idle_power_watts: float = Field(default=70.0, gt=0)
    base_sm_clock_hertz: float = Field(default=1.59e9, gt=0)
    max_sm_clock_hertz: float = Field(gt=0)
    hbm_bandwidth_bytes_per_second: float = Field(gt=0)
    peak_bf16_tensor_flops: float = Field(gt=0)
    pci_bus_ids: list[str] | None = None


class NvlinkSpec(Strict):
    generation: int = Field(ge=1)
    switch: str
    links_per_gpu: int = Field(ge=1)
    bandwidth_per_direction_bytes_per_second: float = Field(gt=0)
    nccl_bus_bandwidth_bytes_per_second: float = Field(gt=0)


class HcaSpec(Strict):
    count: int = Field(ge=0, le=64)
    model: str
    hca_type: str
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    rate_bits_per_second: BitsPerSecond
    device_prefix: str = "mlx5_"


class NodeGroup(Strict):
    name: str = Field(min_length=1)
    hostnames: str = Field(min_length=1, description="Slurm hostlist, e.g. gpu[01-02]")
    cpu: CpuSpec
    memory_bytes: Bytes
    gpu: GpuSpec
    nvlink: NvlinkSpec | None = None
    hcas: HcaSpec | None = None


class Interconnect(Strict):
    kind: Literal["infiniband", "roce", "ethernet"]
    generation: str
    topology: str
    leaf_switches: int = Field(ge=0)
    spine_switches: int = Field(ge=0)
    port_rate_bits_per_second: BitsPerSecond


class Storage(Strict):
    kind: Literal["lustre", "spectrum-scale"]
    name: str
    mount_point: str
    metadata_targets: int = Field(ge=1)
    object_targets: int = Field(ge=1)
    datasets_root: str
    checkpoints_root: str
    #: OSTs of the datasets' pool (``<name>-OST<hex>``), read-only to jobs: none writes there.
    dataset_targets: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _dataset_targets_exist(self) -> Storage:
        osts = {f"{self.name}-OST{i:04x}" for i in range(self.object_targets)}
        unknown = [t for t in self.dataset_targets if t not in osts]
        if unknown:
            raise ValueError(f"dataset_targets: {', '.join(unknown)} not an OST of {self.name}")
        if self.dataset_targets and osts <= set(self.dataset_targets):
            raise ValueError("dataset_targets: leave at least one OST the jobs can write")
        return self


class Partition(Strict):
    name: str
    nodes: str
    default: bool = False
    max_time_seconds: int | None = Field(default=None, gt=0)


class Scheduler(Strict):
    kind: Literal["slurm"] = "slurm"
    version: str
    cluster_name: str
    partitions: list[Partition] = Field(min_length=1)


class SoftwareItem(Strict):
    name: str
    version: str


class ModelWeights(Strict):
    checkpoint_root: str
    formats: list[str] = Field(min_length=1)


class Pricing(Strict):
    gpu_hour: float = Field(ge=0)
    currency: str = "USD"


class TopologyFile(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    pricing: Pricing
    node_groups: list[NodeGroup] = Field(min_length=1)
    interconnect: Interconnect
    storage: Storage
    scheduler: Scheduler
    software: list[SoftwareItem] = Field(min_length=1)
    model_weights: ModelWeights
