"""Job notes: what is wrong with a job, the threshold it crossed, and what to do about it.

Each note rule looks at :class:`~hpcscope.analysis.notify.facts.JobFacts` and returns at most
one :class:`Note`. A note says, in this order, what was measured (with its unit), which
threshold it crossed, and what the researcher can change. Thresholds are data
(:class:`NoteThresholds`, the ``notes:`` section of ``deploy/notify/notifications.yaml``);
the defaults are starting values a site tunes.

Rules (ids are stable: the CLI, the API and the notification rules name them):

* ``unused-gpus``: no GPU of the job did any work (every GPU idle).
* ``over-requested-gpus``: some allocated GPUs idle while the others work.
* ``low-real-efficiency``: the job's real efficiency (SM active) under the threshold.
* ``data-starved``: the GPUs sit between kernels most of the time (reported utilisation low
  but not idle) and compute little: the input pipeline does not keep up.
* ``straggler-gpu``: one GPU computes while its peers wait at the barrier for it.
* ``memory-headroom``: peak GPU memory far under the GPU's memory (a smaller GPU or a larger
  batch would do), or so close to it that the job risks running out.
* ``gpu-xid``: a GPU raised an Xid error during the job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from hpcscope.analysis.notify.facts import GpuFacts, JobFacts


class NoteLevel(StrEnum):
    """How much the note matters: ``error`` wastes the allocation, ``warning`` a good part
    of it, ``info`` is advice."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class NoteThresholds:
    """The note rules' thresholds (ratios 0-1, seconds).

    Attributes:
        min_runtime_seconds: jobs that ran less than this get no efficiency notes (start-up).
        idle_ratio: a GPU at or under this real efficiency and reported utilisation is idle.
        low_efficiency_sm_ratio: job real efficiency under this is low.
        starved_util_ratio: reported utilisation under this (and above ``idle_ratio``) means
            the GPU waits between kernels.
        starved_sm_ratio: ... while real efficiency is under this.
        memory_low_ratio: peak memory under this share of the GPU's memory is much headroom.
        memory_high_ratio: peak memory at or over this share risks running out.
    """

    min_runtime_seconds: float = 600.0
    idle_ratio: float = 0.05
    low_efficiency_sm_ratio: float = 0.25
    starved_util_ratio: float = 0.6
    starved_sm_ratio: float = 0.3
    memory_low_ratio: float = 0.2
    memory_high_ratio: float = 0.95


@dataclass(frozen=True, slots=True)
class Note:
    """One note about a job.

    Attributes:
        rule_id: the note rule (``low-real-efficiency``...).
        level: error, warning or info.
        problem: what is wrong, with the measured figures and their units.
        threshold: the threshold crossed, in words.
        advice: what to do.
        gpus: the GPUs the note is about (``gpu01 GPU 3``), empty for the whole job.
        figures: the measured values behind the note, by name (ratios 0-1, bytes, counts).
    """

    rule_id: str
    level: NoteLevel
    problem: str
    threshold: str
    advice: str
    gpus: tuple[str, ...] = ()
    figures: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "rule_id": self.rule_id,
            "level": self.level.value,
            "problem": self.problem,
            "threshold": self.threshold,
            "advice": self.advice,
            "gpus": list(self.gpus),
            "figures": dict(self.figures),
        }


def pct(value: float | None) -> str:
    """``0.123`` -> ``"12 %"``; None -> ``"unknown"``."""
    return "unknown" if value is None else f"{value * 100:.0f} %"


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def _idle(gpu: GpuFacts, t: NoteThresholds) -> bool:
    if gpu.sm_active_ratio is None and gpu.reported_util_ratio is None:
        return False  # no data is not idle
    return (gpu.sm_active_ratio or 0.0) <= t.idle_ratio and (
        gpu.reported_util_ratio or 0.0
    ) <= t.idle_ratio


def _long_enough(job: JobFacts, t: NoteThresholds) -> bool:
    return job.elapsed_seconds is not None and job.elapsed_seconds >= t.min_runtime_seconds


def _measured(job: JobFacts) -> list[GpuFacts]:
    return [g for g in job.gpus if g.sm_active_ratio is not None or g.reported_util_ratio]


def unused_gpus(job: JobFacts, t: NoteThresholds) -> Note | None:
    measured = _measured(job)
    if not measured or not _long_enough(job, t) or not all(_idle(g, t) for g in measured):
        return None
    return Note(
        "unused-gpus",
        NoteLevel.ERROR,
        f"The job did not use its {len(measured)} GPU(s): real efficiency (SM active) "
        f"{pct(job.sm_active_ratio)}, reported utilization {pct(job.reported_util_ratio)}.",
        f"a GPU is idle at or under {pct(t.idle_ratio)} SM active and utilization",
        "Check that the code runs on the GPU (device placement, CUDA build of the framework) "
        "before submitting more GPU jobs; an idle allocation keeps GPUs from others.",
        figures={"gpus_idle": float(len(measured))},
    )


def over_requested_gpus(job: JobFacts, t: NoteThresholds) -> Note | None:
    measured = _measured(job)
    idle = [g for g in measured if _idle(g, t)]
    if not idle or len(idle) == len(measured) or not _long_enough(job, t):
        return None
    allocated = job.gpus_allocated or len(measured)
    used = allocated - len(idle)
    return Note(
        "over-requested-gpus",
        NoteLevel.WARNING,
        f"{len(idle)} of the {allocated} allocated GPUs did no work "
        f"({', '.join(g.label for g in idle)}).",
        f"a GPU is idle at or under {pct(t.idle_ratio)} SM active and utilization",
        f"Request only the GPUs the code uses (--gpus={used}), or make it use all of them "
        "(torchrun --nproc-per-node, a DistributedSampler).",
        gpus=tuple(g.label for g in idle),
        figures={"gpus_idle": float(len(idle)), "gpus_allocated": float(allocated)},
    )


def low_real_efficiency(job: JobFacts, t: NoteThresholds) -> Note | None:
    real = job.sm_active_ratio
    if real is None or real >= t.low_efficiency_sm_ratio or not _long_enough(job, t):
        return None
    if unused_gpus(job, t) is not None:
        return None  # the stronger note says it
    return Note(
        "low-real-efficiency",
        NoteLevel.WARNING,
        f"Real GPU efficiency (SM active) was {pct(real)} while reported utilization was "
        f"{pct(job.reported_util_ratio)}: the SMs computed {pct(real)} of the allocated time.",
        f"real efficiency under {pct(t.low_efficiency_sm_ratio)}",
        "Profile a few steps (hpcscope traces analyze) to see which phase waits: input "
        "pipeline, communication or small kernels; a larger batch, mixed precision or fewer "
        "GPUs usually help.",
        figures={"sm_active_ratio": real},
    )


def data_starved(job: JobFacts, t: NoteThresholds) -> Note | None:
    starved = [
        g
        for g in _measured(job)
        if g.reported_util_ratio is not None
        and t.idle_ratio < g.reported_util_ratio < t.starved_util_ratio
        and (g.sm_active_ratio or 0.0) < t.starved_sm_ratio
    ]
    if not starved or len(starved) * 2 < len(_measured(job)) or not _long_enough(job, t):
        return None
    util = sum(g.reported_util_ratio or 0.0 for g in starved) / len(starved)
    return Note(
        "data-starved",
        NoteLevel.WARNING,
        f"{len(starved)} GPU(s) had a kernel running only {pct(util)} of the time: they wait "
        "between steps for the next batch.",
        f"reported utilization under {pct(t.starved_util_ratio)} with real efficiency under "
        f"{pct(t.starved_sm_ratio)}",
        "Feed the GPUs faster: more DataLoader workers (num_workers, one per CPU core "
        "requested), pin_memory and prefetching, data on local or parallel storage rather "
        "than home directories, and preprocessing done once ahead of training.",
        gpus=tuple(g.label for g in starved),
        figures={"reported_util_ratio": util},
    )


def straggler_gpu(job: JobFacts, t: NoteThresholds) -> Note | None:
    slow = [g for g in job.gpus if g.verdict == "straggler"]
    if not slow:
        return None
    first = slow[0]
    cause = (
        f" It was thermally throttled (up to {first.max_temperature_celsius:.0f} °C)."
        if first.thermal_throttled and first.max_temperature_celsius is not None
        else ""
    )
    return Note(
        "straggler-gpu",
        NoteLevel.WARNING,
        f"{first.label} computed {pct(first.sm_active_ratio)} of the time while the other GPUs "
        f"({pct(first.peer_sm_active_ratio)} SM active) waited for it at each barrier.{cause}",
        "SM active above its peers' median while they look busy (docs/efficiency.md)",
        "Report the node to the administrators if it is throttled or slower than its peers; "
        "otherwise balance the work across ranks (uneven shards or sequence lengths).",
        gpus=tuple(g.label for g in slow),
        figures={
            "sm_active_ratio": first.sm_active_ratio or 0.0,
            "peer_sm_active_ratio": first.peer_sm_active_ratio or 0.0,
        },
    )


def memory_headroom(job: JobFacts, t: NoteThresholds) -> Note | None:
    known = [(g, g.memory_used_ratio) for g in job.gpus if g.memory_used_ratio is not None]
    if not known or not _long_enough(job, t):
        return None
    full = [(g, r) for g, r in known if r is not None and r >= t.memory_high_ratio]
    if full:
        gpu, ratio = max(full, key=lambda pair: pair[1] or 0.0)
        return Note(
            "memory-headroom",
            NoteLevel.WARNING,
            f"{gpu.label} used up to {_gib(gpu.max_fb_used_bytes or 0)} of "
            f"{_gib(gpu.fb_total_bytes or 0)} GPU memory ({pct(ratio)}).",
            f"peak memory at or over {pct(t.memory_high_ratio)} of the GPU's memory",
            "The job is close to running out of GPU memory: lower the batch size, use "
            "activation checkpointing or shard the optimizer state before it fails.",
            gpus=tuple(g.label for g, _ in full),
            figures={"memory_used_ratio": ratio or 0.0},
        )
    peak = max(r or 0.0 for _, r in known)
    if peak >= t.memory_low_ratio:
        return None
    return Note(
        "memory-headroom",
        NoteLevel.INFO,
        f"The job used at most {pct(peak)} of its GPUs' memory.",
        f"peak memory under {pct(t.memory_low_ratio)} of the GPU's memory",
        "A larger batch would use the GPU better; or run on a smaller GPU (a MIG slice) if "
        "the site has them, and leave the large ones to jobs that need the memory.",
        figures={"memory_used_ratio": peak},
    )


def gpu_xid(job: JobFacts, t: NoteThresholds) -> Note | None:
    bad = [g for g in job.gpus if g.xid is not None]
    if not bad:
        return None
    xids = ", ".join(f"Xid {g.xid} on {g.label}" for g in bad)
    ended = f" and the job ended {job.state}" if job.state and job.state != "RUNNING" else ""
    return Note(
        "gpu-xid",
        NoteLevel.ERROR,
        f"A GPU error was raised during the job: {xids}{ended}.",
        "any Xid seen to change during the job",
        "Resubmit excluding the node (--exclude) and tell the administrators; if the same "
        "Xid follows the job to other nodes, check the code for out-of-bounds memory access.",
        gpus=tuple(g.label for g in bad),
        figures={"xid": float(bad[0].xid or 0)},
    )


NoteRule = Callable[[JobFacts, NoteThresholds], Note | None]

#: Every note rule, in the order notes are shown (most serious first).
NOTE_RULES: tuple[NoteRule, ...] = (
    gpu_xid,
    unused_gpus,
    over_requested_gpus,
    straggler_gpu,
    data_starved,
    low_real_efficiency,
    memory_headroom,
)

#: The ids the note rules above may return.
NOTE_IDS = (
    "gpu-xid",
    "unused-gpus",
    "over-requested-gpus",
    "straggler-gpu",
    "data-starved",
    "low-real-efficiency",
    "memory-headroom",
)


def job_notes(
    job: JobFacts,
    *,
    thresholds: NoteThresholds = NoteThresholds(),
    rules: tuple[NoteRule, ...] = NOTE_RULES,
) -> list[Note]:
    """The notes of one job, most serious first (at most one per rule).

    Args:
        job: the job's facts.
        thresholds: the note rules' thresholds.
        rules: the note rules to apply (pluggable; default all of :data:`NOTE_RULES`).
    """
    notes = [note for rule in rules if (note := rule(job, thresholds)) is not None]
    order = {level: i for i, level in enumerate(NoteLevel)}
    return sorted(notes, key=lambda n: order[n.level])
