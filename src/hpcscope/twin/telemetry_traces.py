"""Telemetry the twin's security scenarios emit, in the collectors' own formats.

What ``twin/attacks_telemetry.py`` builds its scenarios from: node_exporter InfiniBand pages
(``render_infiniband_page``), dcgm-exporter pages with the ``hpc_job`` label
(``render_page``), ``lctl get_param *.job_stats`` snapshots (the twin's Lustre entries),
``lfs changelog`` records and ``nvidia-smi --query-compute-apps --format=csv`` output. Traffic
is a function of time; counters integrate it, scrape by scrape, with a seeded jitter, and
events (``perfquery -R`` resets, error bursts) act on them between scrapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.model.topology import Gpu, GpuModel, Hca
from hpcscope.twin.dcgm import render_page
from hpcscope.twin.lustre import JobStatsEntry, LustreTarget, OpCounter, format_job_id
from hpcscope.twin.node_exporter import BULK_PACKET_BYTES, PortCounters, render_infiniband_page
from hpcscope.twin.workloads import GpuCounters

SECOND_NS = 1_000_000_000
SCRAPE_SECONDS = 15.0
PORTS_PER_NODE = 8
#: An idle port's subnet management and keep-alive traffic, each way.
IDLE_PORT_BYTES_PER_SECOND = 2.0e5

H100 = GpuModel(
    name="NVIDIA H100 80GB HBM3", form_factor="SXM5", memory_bytes=80 * 2**30, sm_count=132,
    max_power_watts=700.0, idle_power_watts=70.0, base_sm_clock_hertz=1.59e9,
    max_sm_clock_hertz=1.98e9, hbm_bandwidth_bytes_per_second=3.35e12,
    peak_bf16_tensor_flops=989e12,
)  # fmt: skip


def hcas(node: str) -> tuple[Hca, ...]:
    """A rail-optimised H100 node: ``mlx5_<i>`` port 1 beside GPU ``i`` (ConnectX-7, NDR)."""
    return tuple(
        Hca(node=node, device=f"mlx5_{i}", port=1, gpu_index=i, hca_type="MT4129",
            model="ConnectX-7", link_layer="InfiniBand", rate_bits_per_second=400e9)
        for i in range(PORTS_PER_NODE)
    )  # fmt: skip


def gpus(node: str) -> tuple[Gpu, ...]:
    """The node's eight H100s (stable UUIDs from the node name)."""
    digits = "".join(c for c in node if c.isdigit()) or "0"
    return tuple(
        Gpu(node=node, index=i, uuid=f"GPU-{int(digits):08x}-0000-4000-8000-{i:012x}",
            pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0", model=H100)
        for i in range(PORTS_PER_NODE)
    )  # fmt: skip


PortTraffic = Mapping[int, tuple[float, float]]
"""Port index -> (receive, transmit) bytes per second beyond the idle background."""


@dataclass
class IbNode:
    """One node's InfiniBand traffic and events.

    Attributes:
        name: the node.
        traffic: seconds since the start -> per-port traffic over the scrape ending then.
        resets: seconds -> ports whose counters ``perfquery -R`` clears just before that scrape.
        constraint_errors: seconds -> (port, packets) of P_Key violations before that scrape.
    """

    name: str
    traffic: Callable[[float], PortTraffic]
    resets: dict[float, tuple[int, ...]] = field(default_factory=dict)
    constraint_errors: dict[float, tuple[int, float]] = field(default_factory=dict)


def ib_pages(
    t0_ns: int,
    nodes: Sequence[IbNode],
    *,
    duration_seconds: float,
    seed: int,
    jitter_ratio: float = 0.005,
) -> list[tuple[int, str, str, str]]:
    """Every scrape of every node: ``(ts_ns, "infiniband", node, node_exporter page)``."""
    rng = np.random.default_rng(seed)
    pages: list[tuple[int, str, str, str]] = []
    state = {
        n.name: [PortCounters(received_bytes=float(rng.integers(1, 9)) * 1e12,
                              transmitted_bytes=float(rng.integers(1, 9)) * 1e12)
                 for _ in range(PORTS_PER_NODE)]
        for n in nodes
    }  # fmt: skip
    steps = int(duration_seconds // SCRAPE_SECONDS)
    for k in range(steps + 1):
        t = k * SCRAPE_SECONDS
        for node in nodes:
            ports = state[node.name]
            if k > 0:
                traffic = node.traffic(t)
                for i, port in enumerate(ports):
                    rx, tx = traffic.get(i, (0.0, 0.0))
                    rx = (rx + IDLE_PORT_BYTES_PER_SECOND) * (1 + rng.normal(0, jitter_ratio))
                    tx = (tx + IDLE_PORT_BYTES_PER_SECOND) * (1 + rng.normal(0, jitter_ratio))
                    port.received_bytes += max(rx, 0.0) * SCRAPE_SECONDS
                    port.transmitted_bytes += max(tx, 0.0) * SCRAPE_SECONDS
                    port.received_packets += max(rx, 0.0) * SCRAPE_SECONDS / BULK_PACKET_BYTES
                    port.transmitted_packets += max(tx, 0.0) * SCRAPE_SECONDS / BULK_PACKET_BYTES
            for i in node.resets.get(t, ()):
                ports[i] = PortCounters()  # perfquery -R: every counter of the port to 0
            if t in node.constraint_errors:
                i, packets = node.constraint_errors[t]
                name = "node_infiniband_port_constraint_errors_received_total"
                ports[i].extra[name] = ports[i].extra.get(name, 0.0) + packets
            page = render_infiniband_page(hcas(node.name), ports)
            pages.append((t0_ns + int(t * SECOND_NS), "infiniband", node.name, page))
    return pages


@dataclass(frozen=True, slots=True)
class GpuState:
    """What one GPU shows at one scrape: utilisation (0-1), SM active, FB used, its job."""

    util_ratio: float = 0.0
    sm_active_ratio: float = 0.0
    fb_used_mib: float = 400.0
    job_id: str | None = None
    xid_counts: tuple[tuple[int, int], ...] = ()
    """Xids within dcgm-exporter's window: ``(code, count)`` pairs (GM-4)."""


def _counters(state: GpuState) -> GpuCounters:
    busy = state.sm_active_ratio
    return GpuCounters(
        gpu_util_percent=round(state.util_ratio * 100), sm_active_ratio=busy,
        sm_occupancy_ratio=busy * 0.5, tensor_active_ratio=busy * 0.6,
        dram_active_ratio=busy * 0.4, gr_engine_active_ratio=busy, fb_used_mib=state.fb_used_mib,
        fb_free_mib=81559 - state.fb_used_mib, fb_reserved_mib=0.0,
        power_watts=70.0 + 600.0 * busy, energy_millijoules=0.0, gpu_temp_celsius=35 + 30 * busy,
        memory_temp_celsius=38 + 25 * busy, sm_clock_mhz=1980.0 if busy else 345.0,
        mem_clock_mhz=2619.0, clock_throttle_reasons=0, pcie_tx_bytes_per_second=0.0,
        pcie_rx_bytes_per_second=0.0, nvlink_tx_bytes_per_second=0.0,
        nvlink_rx_bytes_per_second=0.0, xid_counts=state.xid_counts,
        xid_last=state.xid_counts[-1][0] if state.xid_counts else 0,
    )  # fmt: skip


def dcgm_pages(
    t0_ns: int,
    node: str,
    state: Callable[[float, int], GpuState],
    *,
    duration_seconds: float,
) -> list[tuple[int, str, str, str]]:
    """Every scrape of one node's dcgm-exporter: ``(ts_ns, "dcgm", node, page)``; the
    ``hpc_job`` label is the job the mapping directory names for each GPU."""
    pages = []
    steps = int(duration_seconds // SCRAPE_SECONDS)
    for k in range(steps + 1):
        t = k * SCRAPE_SECONDS
        states = {g.index: state(t, g.index) for g in gpus(node)}
        jobs = {str(i): [s.job_id] for i, s in states.items() if s.job_id is not None}
        page = render_page(gpus(node), {i: _counters(s) for i, s in states.items()}, jobs,
                           hostname=node)  # fmt: skip
        pages.append((t0_ns + int(t * SECOND_NS), "dcgm", node, page))
    return pages


@dataclass(frozen=True, slots=True)
class LustreFlow:
    """Bytes a job moves to or from one target: ``rate`` (seconds -> bytes per second)."""

    jobid: str
    target: LustreTarget
    operation: str
    rate: Callable[[float], float]


def job_stats_snapshots(
    t0_ns: int, flows: Sequence[LustreFlow], *, duration_seconds: float
) -> list[tuple[str, str]]:
    """``lctl get_param obdfilter.*.job_stats`` output of each server at each scrape:
    ``(server, text)`` in time order (an entry's ``snapshot_time`` moves when it changes)."""
    entries: dict[tuple[str, str], JobStatsEntry] = {}
    out: list[tuple[str, str]] = []
    steps = int(duration_seconds // SCRAPE_SECONDS)
    servers = sorted({f.target.server for f in flows})
    for k in range(1, steps + 1):
        t = k * SCRAPE_SECONDS
        now_ns = t0_ns + int(t * SECOND_NS)
        for flow in flows:
            moved = int(flow.rate(t) * SCRAPE_SECONDS)
            if moved <= 0:
                continue
            key = (flow.jobid, flow.target.name)
            entry = entries.get(key)
            if entry is None:
                start = now_ns - int(SCRAPE_SECONDS * SECOND_NS)
                ops = {name: OpCounter() for name in flow.target.operations}
                entry = entries[key] = JobStatsEntry(flow.jobid, flow.target, start, now_ns, ops)
            size = 4 * 2**20
            count = max(1, math.ceil(moved / size))
            entry.ops[flow.operation].add(count, moved, moved * size, min(moved, size), size)
            entry.ops[flow.operation].hist[size] = (
                entry.ops[flow.operation].hist.get(size, 0) + count
            )
            entry.latest_ns = now_ns
        for server in servers:
            targets = sorted({f.target for f in flows if f.target.server == server},
                             key=lambda x: x.name)  # fmt: skip
            text = ""
            for target in targets:
                mine = [e for (_, name), e in sorted(entries.items()) if name == target.name]
                text += f"{target.parameter}=\njob_stats:\n" + "".join(e.render() for e in mine)
            out.append((server, text))
    return out


_TYPES = {"CREAT": 1, "MKDIR": 2, "HLINK": 3, "SLINK": 4, "MKNOD": 5, "UNLNK": 6, "RMDIR": 7,
          "RENME": 8, "RNMTO": 9, "OPEN": 10, "CLOSE": 11, "LYOUT": 12, "TRUNC": 13,
          "SATTR": 14, "XATTR": 15, "HSM": 16, "MTIME": 17, "CTIME": 18, "ATIME": 19}  # fmt: skip


def changelog_record(
    index: int,
    record_type: str,
    when: datetime,
    *,
    target_fid: str,
    jobid: str | None,
    uid: int,
    nid: str,
    parent_fid: str | None = None,
    name: str | None = None,
    source: tuple[str, str, str] | None = None,
) -> str:
    """One record as ``lfs changelog`` prints it (``source``: a rename's old FID, parent FID
    and name)."""
    parts = [
        str(index), f"{_TYPES[record_type]:02d}{record_type}",
        when.strftime("%H:%M:%S.") + f"{when.microsecond:06d}000", when.strftime("%Y.%m.%d"),
        "0x0", f"t={target_fid}",
    ]  # fmt: skip
    if jobid is not None:
        parts.append(f"j={jobid}")
    parts += ["ef=0xf", f"u={uid}:{uid}", f"nid={nid}"]
    if parent_fid is not None:
        parts += [f"p={parent_fid}", name or ""]
    if source is not None:
        parts += [f"s={source[0]}", f"sp={source[1]}", source[2]]
    return " ".join(parts)


def compute_apps(rows: Sequence[tuple[int, str, int, str, float]]) -> str:
    """``nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory
    --format=csv`` for ``(ts_ns, gpu_uuid, pid, process_name, used MiB)`` rows."""
    lines = ["timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    for ts_ns, uuid, pid, name, mib in rows:
        when = from_epoch_seconds(ts_ns / SECOND_NS)
        stamp = when.strftime("%Y/%m/%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"
        lines.append(f"{stamp}, {uuid}, {pid}, {name}, {mib:.0f} MiB")
    return "\n".join(lines) + "\n"


__all__ = ["format_job_id"]
