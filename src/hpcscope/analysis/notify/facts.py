"""What the notes and notification rules look at: a job's figures, per GPU and per minute.

The service builds these from the job report, the kept GPU summaries and the 1-minute rollups;
the rules here never read a store or a clock (``now`` is passed in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One GPU of a job over its life.

    Attributes:
        node: the node's name.
        gpu: the GPU index on the node.
        verdict: :class:`hpcscope.analysis.jobs.efficiency.GpuVerdict` value (``idle``,
            ``straggler``...).
        sm_active_ratio: real efficiency, time-weighted mean (0-1), None when unknown.
        reported_util_ratio: reported GPU utilisation, time-weighted mean (0-1).
        peer_sm_active_ratio: median real efficiency of the job's other GPUs.
        max_temperature_celsius: hottest sample.
        thermal_throttled: a thermal slowdown reason was seen for most of the time.
        xid: the Xid the GPU raised during the job, if any.
        max_fb_used_bytes: most framebuffer memory in use at once.
        fb_total_bytes: the GPU's memory (topology), None when unknown.
    """

    node: str
    gpu: int
    verdict: str
    sm_active_ratio: float | None
    reported_util_ratio: float | None
    peer_sm_active_ratio: float | None = None
    max_temperature_celsius: float | None = None
    thermal_throttled: bool = False
    xid: int | None = None
    max_fb_used_bytes: float | None = None
    fb_total_bytes: float | None = None

    @property
    def label(self) -> str:
        return f"{self.node} GPU {self.gpu}"

    @property
    def memory_used_ratio(self) -> float | None:
        """Peak memory over the GPU's memory (0-1), None when either is unknown."""
        if self.max_fb_used_bytes is None or not self.fb_total_bytes:
            return None
        return min(1.0, self.max_fb_used_bytes / self.fb_total_bytes)


@dataclass(frozen=True, slots=True)
class GpuMinute:
    """One GPU in one minute (a 1-minute rollup's means)."""

    minute: datetime
    node: str
    gpu: int
    sm_active_ratio: float | None
    reported_util_ratio: float | None


@dataclass(frozen=True, slots=True)
class JobFacts:
    """One job: the scheduler's record, the job-level figures and its GPUs.

    Attributes:
        job_id: the Slurm job id.
        user / account / partition / state: the scheduler's record (state: ``RUNNING``...).
        start_time: when it started (naive UTC), None while pending.
        elapsed_seconds: run time so far (or in all).
        gpus_allocated: GPUs Slurm allocated, None when unknown.
        sm_active_ratio / reported_util_ratio: the job's time-weighted means over its GPUs.
        gpus: per-GPU facts, in (node, gpu) order.
        minutes: the recent 1-minute rollups of its GPUs (the notification rules' window).
    """

    job_id: str
    user: str | None
    account: str | None
    state: str | None
    elapsed_seconds: float | None
    gpus_allocated: int | None
    sm_active_ratio: float | None
    reported_util_ratio: float | None
    gpus: tuple[GpuFacts, ...] = ()
    partition: str | None = None
    start_time: datetime | None = None
    minutes: tuple[GpuMinute, ...] = field(default_factory=tuple)
