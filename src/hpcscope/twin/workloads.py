"""Workload profiles: what a GPU's counters read while a job of each kind runs on it.

The counters are derived from one model of where a GPU's time goes during a training step, so
they stay physically consistent with each other (the same arithmetic a reader of the dashboard
has to do in reverse):

* ``compute``: dense kernels fill the SMs (SM active ~0.93) and drive the tensor pipes;
* ``collective``: an NCCL kernel is resident, moving data or spinning at the barrier; it runs on
  ``nChannels`` thread blocks (~21 of the H100's 132 SMs, SM active ~0.16) — GPU_UTIL counts it
  as busy (training-steps.md §1);
* ``small_kernels``: launch-bound element-wise kernels (SM active ~0.2);
* the rest: no kernel resident (the GPU is idle, e.g. waiting on the input pipeline alone).

``GPU_UTIL`` is the share of time with any kernel resident; ``SM_ACTIVE`` weights each share by
how much of the SM array it occupies; power follows activity; temperature follows power with a
thermal time constant; the energy counter integrates power; a thermally throttled GPU runs its
SM clock low, which is what makes a straggler slow.

The data-starved profile reproduces the seed's "87 % reported, 19 % real" job: ranks mostly
wait in NCCL for the rank still loading its batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from hpcscope.model.topology import GpuModel

# NVML clock-event (throttle) reason bits, as DCGM_FI_DEV_CLOCK_THROTTLE_REASONS reports them.
THROTTLE_GPU_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40

#: Share of the SM array an NCCL kernel occupies (about 21 channels out of 132 SMs).
NCCL_SM_SHARE = 0.16
COMPUTE_SM_SHARE = 0.93
SMALL_KERNEL_SM_SHARE = 0.20
IDLE_SM_CLOCK_HERTZ = 345e6


class Profile(StrEnum):
    """The workload kinds the twin runs."""

    HEALTHY = "healthy"
    DATA_STARVED = "data_starved"
    STRAGGLER = "straggler"
    IDLE_ALLOCATED = "idle_allocated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TimeShares:
    """Where one GPU's time goes, as fractions of wall time (they sum to <= 1)."""

    compute: float
    collective: float
    small_kernels: float
    tensor_efficiency: float  # tensor-pipe active while computing
    memory_bytes: float  # framebuffer the job holds
    pcie_rx_bytes_per_second: float
    nvlink_bytes_per_second: float
    thermal_throttle: bool = False


def shares_for(
    profile: Profile, *, gpu_index: int, straggler_gpu: int | None, memory_bytes: float
) -> TimeShares:
    """The time budget of one GPU of a job with ``profile``.

    The straggler profile follows the seed's 42 ms step (data 2, forward 10, backward 20,
    AllReduce 6, optimizer 4 ms) in which one GPU's backward takes twice as long: that GPU
    computes 56 of every 62 ms; the others compute 36 ms and sit 26 ms in NCCL (20 ms waiting
    at the barrier plus the 6 ms AllReduce).
    """
    if profile is Profile.HEALTHY:
        return TimeShares(0.86, 0.10, 0.02, 0.55, 0.88 * memory_bytes, 2.1e9, 60e9)
    if profile is Profile.DATA_STARVED:
        return TimeShares(0.06, 0.64, 0.17, 0.55, 0.37 * memory_bytes, 6.5e9, 9e9)
    if profile is Profile.STRAGGLER:
        step_ms = 62.0
        if gpu_index == straggler_gpu:
            return TimeShares(
                (52 + 4) / step_ms,
                6 / step_ms,
                0.0,
                0.50,
                0.86 * memory_bytes,
                1.4e9,
                35e9,
                thermal_throttle=True,
            )
        return TimeShares(
            (32 + 4) / step_ms, (20 + 6) / step_ms, 0.0, 0.50, 0.86 * memory_bytes, 1.4e9, 35e9
        )
    if profile is Profile.IDLE_ALLOCATED:
        return TimeShares(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    if profile is Profile.FAILED:  # healthy until the fault: the scheduler stops it
        return TimeShares(0.80, 0.12, 0.03, 0.50, 0.80 * memory_bytes, 2.0e9, 50e9)
    raise ValueError(f"unknown profile {profile!r}")


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """One GPU's counters at one instant, in dcgm-exporter's own units (what it prints)."""

    gpu_util_percent: float
    sm_active_ratio: float
    sm_occupancy_ratio: float
    tensor_active_ratio: float
    dram_active_ratio: float
    gr_engine_active_ratio: float
    fb_used_mib: float
    fb_free_mib: float
    fb_reserved_mib: float
    power_watts: float
    energy_millijoules: float
    gpu_temp_celsius: float
    memory_temp_celsius: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    clock_throttle_reasons: int
    xid_last: int
    pcie_tx_bytes_per_second: float
    pcie_rx_bytes_per_second: float
    nvlink_tx_bytes_per_second: float
    nvlink_rx_bytes_per_second: float
    xid_counts: tuple[tuple[int, int], ...] = ()
    """``(Xid code, count within the exporter's window)`` pairs; empty: one Xid, the last."""


@dataclass
class GpuPhysics:
    """The slowly varying physical state of one GPU: temperature and its energy counter."""

    model: GpuModel
    temperature_celsius: float | None = None
    energy_joules: float = 0.0
    xid_last: int = 0

    def step(
        self,
        shares: TimeShares | None,
        *,
        dt_seconds: float,
        rng: np.random.Generator,
        ambient_celsius: float = 28.0,
    ) -> GpuCounters:
        """Advance ``dt_seconds`` and return the counters at the end of the interval.

        Args:
            shares: the running job's time budget on this GPU, or None when no job holds it.
            dt_seconds: simulated seconds since the previous call.
            rng: the twin's seeded generator (noise only; the model is deterministic).
        """
        model = self.model

        def noise(scale: float) -> float:
            return float(rng.normal(0.0, scale))

        if shares is None or (shares.compute + shares.collective + shares.small_kernels) == 0.0:
            util = 0.0
            sm_active = occupancy = tensor = dram = 0.0
            memory_used = 0.0 if shares is None else 512 * 2**20
            pcie_rx = nvlink = 0.0
            throttle_thermal = False
        else:
            c = _clip(shares.compute + noise(0.01))
            m = _clip(shares.collective + noise(0.01))
            s = _clip(shares.small_kernels + noise(0.005))
            util = min(1.0, c + m + s)
            sm_active = _clip(c * COMPUTE_SM_SHARE + m * NCCL_SM_SHARE + s * SMALL_KERNEL_SM_SHARE)
            occupancy = _clip(c * 0.42 + m * 0.06 + s * 0.12)
            tensor = _clip(c * shares.tensor_efficiency)
            dram = _clip(c * 0.38 + m * 0.12 + s * 0.25)
            memory_used = shares.memory_bytes
            pcie_rx = max(0.0, shares.pcie_rx_bytes_per_second * (1 + noise(0.05)))
            nvlink = max(0.0, shares.nvlink_bytes_per_second * (1 + noise(0.05)))
            throttle_thermal = shares.thermal_throttle
        dynamic = model.max_power_watts - model.idle_power_watts
        power = model.idle_power_watts + dynamic * (0.55 * sm_active + 0.40 * tensor + 0.15 * dram)
        power = min(
            model.max_power_watts, max(model.idle_power_watts * 0.9, power * (1 + noise(0.01)))
        )
        # first-order thermal model: equilibrium temperature rises with power
        target = ambient_celsius + 0.075 * power + (18.0 if throttle_thermal else 0.0)
        if self.temperature_celsius is None:  # first reading: the GPU is already warm
            self.temperature_celsius = target
        alpha = 1.0 - math.exp(-dt_seconds / 40.0)
        self.temperature_celsius += (target - self.temperature_celsius) * alpha
        self.energy_joules += power * dt_seconds
        throttle = 0
        if util == 0.0:
            clock = IDLE_SM_CLOCK_HERTZ
            throttle |= THROTTLE_GPU_IDLE
        elif throttle_thermal:
            clock = model.max_sm_clock_hertz * 0.53
            throttle |= THROTTLE_HW_THERMAL | THROTTLE_SW_THERMAL | THROTTLE_HW_SLOWDOWN
        elif power >= model.max_power_watts * 0.98:
            clock = model.max_sm_clock_hertz * 0.9
            throttle |= THROTTLE_SW_POWER_CAP
        else:
            clock = model.max_sm_clock_hertz
        total_mib = model.memory_bytes / 2**20
        reserved_mib = 512.0
        used_mib = min(total_mib - reserved_mib, memory_used / 2**20)
        return GpuCounters(
            gpu_util_percent=round(util * 100),
            sm_active_ratio=sm_active,
            sm_occupancy_ratio=occupancy,
            tensor_active_ratio=tensor,
            dram_active_ratio=dram,
            gr_engine_active_ratio=_clip(util * 0.98),
            fb_used_mib=round(used_mib),
            fb_free_mib=round(total_mib - reserved_mib - used_mib),
            fb_reserved_mib=reserved_mib,
            power_watts=power,
            energy_millijoules=round(self.energy_joules * 1000),
            gpu_temp_celsius=round(self.temperature_celsius),
            memory_temp_celsius=round(self.temperature_celsius + 4),
            sm_clock_mhz=round(clock / 1e6),
            mem_clock_mhz=2619 if util > 0 else 1593,
            clock_throttle_reasons=throttle,
            xid_last=self.xid_last,
            pcie_tx_bytes_per_second=pcie_rx * 0.08,
            pcie_rx_bytes_per_second=pcie_rx,
            nvlink_tx_bytes_per_second=nvlink,
            nvlink_rx_bytes_per_second=nvlink,
        )


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


#: Lustre reads per GPU of each profile (LNet over the GPU's rail HCA), bytes per second. A
#: data-starved job reads as fast as its share of the storage allows and still waits.
STORAGE_READ_BYTES_PER_SECOND: dict[Profile, float] = {
    Profile.HEALTHY: 150e6,
    Profile.DATA_STARVED: 1.2e9,
    Profile.STRAGGLER: 120e6,
    Profile.IDLE_ALLOCATED: 0.0,
    Profile.FAILED: 150e6,
}

#: Inter-node AllReduce traffic per rail while a multi-node job is in its collective phase.
RAIL_COLLECTIVE_BYTES_PER_SECOND = 40e9

#: Mean service time of one Lustre read RPC (``read`` op of job_stats, as the OST measures it)
#: for each profile. Healthy jobs stream large shards (about a millisecond per 1-4 MiB RPC); the
#: data-starved job reads many small files and its RPCs queue on the OSTs behind each other, so
#: the storage side of its data stall shows as read latency an order of magnitude higher.
STORAGE_READ_LATENCY_SECONDS: dict[Profile, float] = {
    Profile.HEALTHY: 0.9e-3,
    Profile.DATA_STARVED: 24e-3,
    Profile.STRAGGLER: 1.2e-3,
    Profile.IDLE_ALLOCATED: 0.6e-3,
    Profile.FAILED: 0.9e-3,
}
