"""A dcgm-exporter-compatible ``/metrics`` page for one twin node.

The page has what dcgm-exporter 4.x prints: ``# HELP``/``# TYPE`` per family, then one line per
GPU with the labels in the exporter's order (``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``hostname``, ``DCGM_FI_DRIVER_VERSION`` and, when the job mapping names jobs,
``hpc_job``), integer fields printed as integers and float fields as Go's ``%f``. Like the real
exporter, it lists the hpc-job-mapping directory on every collection and copies every series of a
GPU once per job id found in that GPU's file.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from hpcscope.model.topology import Gpu, Topology, gpu_uuid
from hpcscope.twin import mapping
from hpcscope.twin.workloads import GpuCounters, GpuPhysics, Profile, TimeShares, shares_for


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    help: str
    attribute: str
    is_float: bool


FAMILIES: tuple[Family, ...] = (
    Family("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", False),
    Family(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz", False
    ),
    Family(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature (in C).",
        "memory_temp_celsius",
        False,
    ),
    Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "gpu_temp_celsius", False),
    Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_watts", True),
    Family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_millijoules",
        False,
    ),
    Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util_percent", False),
    Family(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        "mem_copy_util_percent",
        False,
    ),
    Family(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        "xid_last",
        False,
    ),
    Family(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask).",
        "clock_throttle_reasons",
        False,
    ),
    Family(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib", False
    ),
    Family(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib", False
    ),
    Family(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        "fb_reserved_mib",
        False,
    ),
    Family(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "gr_engine_active_ratio",
        True,
    ),
    Family(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active_ratio",
        True,
    ),
    Family(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        "sm_occupancy_ratio",
        True,
    ),
    Family(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active_ratio",
        True,
    ),
    Family(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active_ratio",
        True,
    ),
    Family(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus "
        "- including both protocol headers and data payloads - in bytes per second.",
        "pcie_tx_bytes_per_second",
        True,
    ),
    Family(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - "
        "including both protocol headers and data payloads - in bytes per second.",
        "pcie_rx_bytes_per_second",
        True,
    ),
    Family(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, "
        "not including protocol headers, in bytes per second.",
        "nvlink_tx_bytes_per_second",
        True,
    ),
    Family(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink, not "
        "including protocol headers, in bytes per second.",
        "nvlink_rx_bytes_per_second",
        True,
    ),
)


def _value(counters: GpuCounters, family: Family) -> str:
    if family.attribute == "mem_copy_util_percent":
        return str(round(counters.dram_active_ratio * 100))
    value = getattr(counters, family.attribute)
    return f"{value:f}" if family.is_float else str(int(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@lru_cache(maxsize=4096)
def _base_labels(gpu: Gpu, hostname: str, driver_version: str) -> str:
    """A GPU's labels in the exporter's order (the same on every page: made once)."""
    return (
        f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
        f'device="{gpu.device}",modelName="{_escape(gpu.model.name)}",'
        f'hostname="{_escape(hostname)}",DCGM_FI_DRIVER_VERSION="{driver_version}"'
    )


_HEADERS = tuple(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.type}" for f in FAMILIES)


def render_page(
    gpus: Sequence[Gpu],
    counters: Mapping[int, GpuCounters],
    jobs_by_gpu: Mapping[str, Sequence[str]],
    *,
    hostname: str,
    driver_version: str = "550.127.08",
) -> str:
    """Render a dcgm-exporter page.

    Args:
        gpus: the node's GPUs, in index order.
        counters: GPU index -> counters at this collection.
        jobs_by_gpu: the mapping directory's content (GPU key -> job ids, one series copy each).
        hostname: the ``hostname`` label value.
    """
    label_sets: list[tuple[int, str]] = []
    for gpu in gpus:
        base = _base_labels(gpu, hostname, driver_version)
        jobs = jobs_by_gpu.get(str(gpu.index))
        if jobs:
            label_sets.extend((gpu.index, f'{base},hpc_job="{_escape(job)}"') for job in jobs)
        else:
            label_sets.append((gpu.index, base))
    values = {index: [_value(counters[index], f) for f in FAMILIES] for index in counters}
    lines: list[str] = []
    for column, (family, header) in enumerate(zip(FAMILIES, _HEADERS, strict=True)):
        lines.append(header)
        name = family.name
        lines.extend(f"{name}{{{labels}}} {values[index][column]}" for index, labels in label_sets)
    xid_lines = [
        f'DCGM_EXP_XID_ERRORS_COUNT{{{labels},xid="{xid}"}} {count}'
        for index, labels in label_sets
        for xid, count in (
            counters[index].xid_counts
            or (((counters[index].xid_last, 1),) if counters[index].xid_last else ())
        )
    ]
    if xid_lines:
        lines.append(
            "# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified "
            "time window (see xid-count-window-size param)."
        )
        lines.append("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge")
        lines.extend(xid_lines)
    return "\n".join(lines) + "\n"


SharesSource = Callable[[int], TimeShares | None]
"""GPU index -> what the GPU is doing now (None: no job on it)."""


class DcgmEndpoint:
    """The live state behind one node's page: GPU physics advanced at each collection.

    Args:
        node: host name (the ``hostname`` label).
        gpus: the node's GPUs.
        mapping_dir: the hpc-job-mapping directory read on every collection.
        shares: what each GPU is doing (from the twin's scheduler, or a fixed profile).
        clock: simulated time source (epoch seconds).
        seed: noise seed.
        collect_interval_seconds: like dcgm-exporter's ``-c``: the page is collected once per
            interval (at multiples of it on ``clock``, shifted by :attr:`collect_phase_seconds`)
            and every scrape within it gets the same page, so several scrapers see the same
            samples; a change of the job mapping is collected at once (a job's label shows
            from its start, as its allocation does); 0 collects at every scrape.
    """

    def __init__(
        self,
        node: str,
        gpus: Sequence[Gpu],
        mapping_dir: str | Path,
        *,
        shares: SharesSource,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        xid_source: Callable[[int], int] | None = None,
        collect_interval_seconds: float = 0.0,
    ) -> None:
        self.node = node
        self.gpus = tuple(gpus)
        self.mapping_dir = Path(mapping_dir)
        self._shares = shares
        self._clock = clock
        self._xid_source = xid_source
        self._physics = {gpu.index: GpuPhysics(gpu.model) for gpu in self.gpus}
        self._last = clock()
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._interval = collect_interval_seconds
        self._page: tuple[tuple[int, str], str] | None = None
        self.collect_phase_seconds = 0.0
        """Where in the interval a new page starts (seconds after a multiple of it)."""
        self._page_lock = threading.Lock()

    def collect(self) -> str:
        """Advance the GPUs to now and render the page (what one scrape returns); within one
        collect interval, the page of its first scrape."""
        if self._interval > 0:
            with self._page_lock:
                tick = math.floor((self._clock() - self.collect_phase_seconds) / self._interval)
                jobs = repr(sorted(mapping.read_mapping(self.mapping_dir).items()))
                if self._page is None or self._page[0] != (tick, jobs):
                    self._page = ((tick, jobs), self._collect())
                return self._page[1]
        return self._collect()

    def _collect(self) -> str:
        with self._lock:
            now = self._clock()
            dt = max(0.0, now - self._last)
            self._last = now
            counters: dict[int, GpuCounters] = {}
            for gpu in self.gpus:
                physics = self._physics[gpu.index]
                if self._xid_source is not None:
                    physics.xid_last = self._xid_source(gpu.index)
                counters[gpu.index] = physics.step(
                    self._shares(gpu.index), dt_seconds=dt, rng=self._rng
                )
            jobs = mapping.read_mapping(self.mapping_dir)
        return render_page(self.gpus, counters, jobs, hostname=self.node)


def mapped_node_endpoint(
    topology: Topology,
    node: str,
    mapping_dir: Path,
    *,
    profile: Profile,
    clock: Callable[[], float] = time.time,
) -> DcgmEndpoint:
    """One node's endpoint over an existing hpc-job-mapping directory (no twin scheduler).

    The node takes the GPUs of the topology's first node design; a GPU whose mapping file names
    a job runs ``profile``, the others are idle. This is what a real Slurm's prolog-written
    directory looks like through dcgm-exporter, for tests on a real scheduler."""
    gpus = [
        dataclasses.replace(g, node=node, uuid=gpu_uuid(topology.name, node, g.index))
        for g in topology.nodes[0].gpus
    ]

    def shares(gpu_index: int) -> TimeShares | None:
        if not mapping.read_mapping(mapping_dir).get(str(gpu_index)):
            return None
        return shares_for(
            profile,
            gpu_index=gpu_index,
            straggler_gpu=None,
            memory_bytes=gpus[gpu_index].model.memory_bytes,
        )

    return DcgmEndpoint(node, gpus, mapping_dir, shares=shares, clock=clock)
