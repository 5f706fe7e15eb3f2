"""Seeded dcgm-exporter pages, written the way the real exporter writes them.

Structure follows NVIDIA/dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``
@d5e5f510 (``# HELP``/``# TYPE`` per field, then one line per GPU with the labels ``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, optionally ``GPU_I_PROFILE``/``GPU_I_ID``,
``hostname``, the CSV ``label`` fields, then attributes such as ``hpc_job``), and the values
the way ``toString`` prints them (``%d`` for integer fields, ``%f`` for doubles). Used by the
ingest tests and by ``bench/``.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldSpec:
    name: str
    prom_type: str
    help: str
    integer: bool
    low: float
    high: float
    per_instance: bool = False
    """MIG: exported per GPU instance (DCP and framebuffer fields) rather than per GPU."""


#: ~20 fields: the GPU_METRICS sources plus the usual health fields, H100-like ranges.
H100_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", True, 345, 1980),
    FieldSpec(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", True, 2619, 2619
    ),
    FieldSpec("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", True, 30, 80),
    FieldSpec("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", True, 28, 85),
    FieldSpec("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", False, 70, 700),
    FieldSpec(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        True,
        1e9,
        9e12,
    ),
    FieldSpec("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", True, 0, 100),
    FieldSpec("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", True, 0, 100),
    FieldSpec(
        "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", True, 0, 0
    ),
    FieldSpec(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons.", True, 0, 8
    ),
    FieldSpec(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", True, 0, 81559, True
    ),
    FieldSpec(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", True, 0, 81559, True
    ),
    FieldSpec(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        False,
        0,
        1,
        True,
    ),
    FieldSpec(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        False,
        0,
        1,
        True,
    ),
    FieldSpec(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        False,
        0,
        1,
        True,
    ),
    FieldSpec(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        False,
        0,
        1,
        True,
    ),
    FieldSpec(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        False,
        0,
        1,
        True,
    ),
    FieldSpec(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        True,
        0,
        5e10,
    ),
    FieldSpec(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        True,
        0,
        5e10,
    ),
    FieldSpec(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
        "per second.",
        True,
        0,
        4.5e11,
    ),
)


def gpu_uuid(node: str, gpu: int) -> str:
    digest = f"{zlib.crc32(f'{node}/{gpu}'.encode()):012x}"
    return f"GPU-{gpu:08x}-0da5-6d26-a36a-{digest}"


def render_dcgm_page(
    node: str,
    *,
    rng: random.Random,
    gpus: int = 8,
    fields: Sequence[FieldSpec] = H100_FIELDS,
    jobs: Mapping[str, Sequence[str]] | None = None,
    mig: Mapping[int, Sequence[tuple[int, str]]] | None = None,
    host_label: str = "hostname",
    model_name: str = "NVIDIA H100 80GB HBM3",
    driver_version: str = "535.129.03",
) -> str:
    """One dcgm-exporter ``/metrics`` page of ``node``.

    Args:
        rng: the values' source (seeded by the caller).
        jobs: hpc-job-mapping file contents: file name (``"3"`` or, for MIG, ``"3.7"``) ->
            lines; each line makes a copy of every series of that GPU with ``hpc_job``.
        mig: GPU index -> its instances (GPU_I_ID, GPU_I_PROFILE).
        host_label: ``hostname`` (current exporters) or ``Hostname`` (before PR #655).
    """
    jobs = jobs or {}
    mig = mig or {}
    lines: list[str] = []
    for spec in fields:
        lines.append(f"# HELP {spec.name} {spec.help}")
        lines.append(f"# TYPE {spec.name} {spec.prom_type}")
        for gpu in range(gpus):
            entities: list[tuple[str, str]] = []  # (extra labels, mapping file)
            if gpu in mig and spec.per_instance:
                entities = [
                    (f',GPU_I_PROFILE="{profile}",GPU_I_ID="{instance}"', f"{gpu}.{instance}")
                    for instance, profile in mig[gpu]
                ]
            elif gpu in mig and spec.name == "DCGM_FI_DEV_GPU_UTIL":
                continue  # not supported on MIG-enabled GPUs
            else:
                entities = [("", str(gpu))]
            for extra, mapping_file in entities:
                base = (
                    f'{spec.name}{{gpu="{gpu}",UUID="{gpu_uuid(node, gpu)}",'
                    f'pci_bus_id="00000000:{0x18 + 0x10 * gpu:02X}:00.0",device="nvidia{gpu}",'
                    f'modelName="{model_name}"{extra},{host_label}="{node}",'
                    f'DCGM_FI_DRIVER_VERSION="{driver_version}"'
                )
                value = rng.uniform(spec.low, spec.high)
                text = f"{round(value):d}" if spec.integer else f"{value:f}"
                job_lines: Sequence[str | None] = jobs.get(mapping_file) or [None]
                for job in job_lines:
                    attribute = "" if job is None else f',hpc_job="{job}"'
                    lines.append(f"{base}{attribute}}} {text}")
    return "\n".join(lines) + "\n"


def cluster_pages(
    nodes: int, *, seed: int, gpus: int = 8, jobs_per_node: int = 1
) -> dict[str, str]:
    """One page per node of a cluster, every GPU held by ``jobs_per_node`` jobs."""
    rng = random.Random(seed)
    pages = {}
    for index in range(nodes):
        node = f"gpu{index + 1:03d}"
        jobs = {
            str(gpu): [str(100000 + index * 10 + job) for job in range(jobs_per_node)]
            for gpu in range(gpus)
        }
        pages[node] = render_dcgm_page(node, rng=rng, gpus=gpus, jobs=jobs)
    return pages
