"""Waste attribution: every allocated GPU-second of a job that was not useful is charged to
exactly one :class:`WasteCause`, so the causes of a job sum to ``allocated - useful``.

Inputs are a finished job's kept summary (``job_summaries``) and its per-GPU rows
(``job_gpu_summaries``), as :class:`JobUse`. Definitions (``docs/chargeback.md``):

* **allocated** ``A`` = the summary's ``allocated_gpu_seconds`` (GPUs x elapsed, what Slurm
  charges); a job without it (no GPU count or no start) is charged its observed GPU-seconds.
* **useful** ``U`` = the summary's ``useful_gpu_seconds`` (sum of sample interval x SM active),
  capped at ``A``. **waste** ``W = A - U``.
* Each GPU gets ``a = A / gpus_allocated`` seconds. Its measured waste ``min(observed, a) -
  useful`` goes to the cause its verdict names; its unmeasured time ``a - observed`` and every
  allocated GPU that has no row go to ``unmeasured``.
* A job that **failed** (exit cause ``user_error``, ``node_failure``, ``node_failure_xid``) has
  all of its waste charged to ``failed_job``: what it computed was lost with it.
* When the parts do not add up to ``W`` (a GPU observed longer than its share, MIG or shared
  GPUs), they are scaled to ``W``; the float residue goes to the largest part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from hpcscope.model.gpu_time import charged_gpu_seconds


class WasteCause(StrEnum):
    """Why an allocated GPU-second was not useful (one cause per GPU-second)."""

    FAILED_JOB = "failed_job"
    IDLE_ALLOCATION = "idle_allocation"
    OVER_REQUESTED = "over_requested"
    BARRIER_WAIT = "barrier_wait"
    DATA_STARVED = "data_starved"
    LOW_EFFICIENCY = "low_efficiency"
    UNMEASURED = "unmeasured"


#: One-line definitions, shown beside the figures (page, CSV header comments, docs).
CAUSE_LABELS: Mapping[WasteCause, str] = {
    WasteCause.FAILED_JOB: "failed jobs: all non-useful time of a job that ended in failure",
    WasteCause.IDLE_ALLOCATION: "idle allocation: every GPU of the job idle",
    WasteCause.OVER_REQUESTED: "over-requested GPUs: idle GPUs of a job whose other GPUs worked",
    WasteCause.BARRIER_WAIT: "barrier wait / straggler: GPUs waiting for, or being, a straggler",
    WasteCause.DATA_STARVED: "data-starved: busy (GPU_UTIL high) but not computing (SM low)",
    WasteCause.LOW_EFFICIENCY: "low efficiency: SM-idle cycles of GPUs that were computing",
    WasteCause.UNMEASURED: "unmeasured: allocated GPU time without samples",
}

#: Exit causes (``analysis.jobs.summary.ExitCause`` values) whose waste is ``failed_job``.
FAILED_EXIT_CAUSES = frozenset({"user_error", "node_failure", "node_failure_xid"})

#: GPU verdicts (``analysis.jobs.efficiency.GpuVerdict`` values) -> the cause of their waste.
#: ``idle`` is resolved per job (idle allocation or over-requested).
VERDICT_CAUSES: Mapping[str, WasteCause] = {
    "straggler": WasteCause.BARRIER_WAIT,
    "waiting_at_barrier": WasteCause.BARRIER_WAIT,
    "busy_not_computing": WasteCause.DATA_STARVED,
    "low_efficiency": WasteCause.LOW_EFFICIENCY,
    "healthy": WasteCause.LOW_EFFICIENCY,
    "xid_error": WasteCause.LOW_EFFICIENCY,
    "no_data": WasteCause.UNMEASURED,
}
IDLE_VERDICT = "idle"


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One GPU row of a kept summary: seconds observed, SM-active seconds, verdict."""

    observed_seconds: float
    useful_seconds: float
    verdict: str


@dataclass(frozen=True, slots=True)
class JobUse:
    """What chargeback needs of one finished job's kept summary."""

    job_id: str
    user: str | None
    account: str | None
    partition: str | None
    gpu_model: str | None
    start_time: datetime | None
    end_time: datetime | None
    gpus_allocated: int | None
    allocated_gpu_seconds: float | None
    observed_gpu_seconds: float
    useful_gpu_seconds: float
    exit_cause: str
    gpus: tuple[GpuUse, ...] = ()


@dataclass(frozen=True, slots=True)
class JobCharge:
    """A job's charge: allocated and useful GPU-seconds and its waste by cause."""

    allocated_gpu_seconds: float
    useful_gpu_seconds: float
    waste_gpu_seconds: Mapping[WasteCause, float]

    def scaled(self, share: float) -> JobCharge:
        """This charge times ``share`` (the part of the job inside a period)."""
        return JobCharge(
            self.allocated_gpu_seconds * share,
            self.useful_gpu_seconds * share,
            {cause: value * share for cause, value in self.waste_gpu_seconds.items()},
        )


def charged_seconds(job: JobUse) -> tuple[float, float]:
    """``(allocated, useful)`` GPU-seconds charged for ``job``
    (:func:`hpcscope.model.gpu_time.charged_gpu_seconds`)."""
    return charged_gpu_seconds(
        job.allocated_gpu_seconds, job.observed_gpu_seconds, job.useful_gpu_seconds
    )


_CAUSES = tuple(WasteCause)


def _parts(job: JobUse, allocated: float) -> dict[WasteCause, float]:
    """Unscaled waste per cause from the GPU rows."""
    parts = dict.fromkeys(_CAUSES, 0.0)
    if job.exit_cause in FAILED_EXIT_CAUSES:
        parts[WasteCause.FAILED_JOB] = 1.0  # all of W, whatever the GPUs did
        return parts
    count = job.gpus_allocated if job.gpus_allocated else len(job.gpus)
    if count <= 0:
        parts[WasteCause.UNMEASURED] = 1.0
        return parts
    share = allocated / count
    all_idle = bool(job.gpus) and all(g.verdict == IDLE_VERDICT for g in job.gpus)
    idle_cause = WasteCause.IDLE_ALLOCATION if all_idle else WasteCause.OVER_REQUESTED
    unmeasured = 0.0
    for gpu in job.gpus:
        observed = gpu.observed_seconds
        observed = 0.0 if observed < 0.0 else share if observed > share else observed
        useful = gpu.useful_seconds if gpu.useful_seconds > 0.0 else 0.0
        if gpu.verdict == IDLE_VERDICT:
            cause = idle_cause
        else:
            cause = VERDICT_CAUSES.get(gpu.verdict, WasteCause.UNMEASURED)
        if observed > useful:
            parts[cause] += observed - useful
        unmeasured += share - observed
    parts[WasteCause.UNMEASURED] += unmeasured + max(0, count - len(job.gpus)) * share
    return parts


def attribute_waste(job: JobUse) -> JobCharge:
    """The job's allocated and useful GPU-seconds and its waste, one cause per GPU-second.

    The causes sum to ``allocated - useful`` (up to float rounding) and are never negative.
    """
    allocated, useful = charged_seconds(job)
    waste = allocated - useful
    parts = _parts(job, allocated)
    total = sum(parts.values())
    result = dict.fromkeys(_CAUSES, 0.0)
    if waste <= 0.0:
        return JobCharge(allocated, useful, result)
    if total <= 0.0:  # nothing measured explains it
        result[WasteCause.UNMEASURED] = waste
        return JobCharge(allocated, useful, result)
    scale = waste / total
    for cause, part in parts.items():
        result[cause] = part * scale
    largest = max(result, key=result.__getitem__)
    result[largest] = max(0.0, result[largest] + waste - sum(result.values()))
    return JobCharge(allocated, useful, result)
