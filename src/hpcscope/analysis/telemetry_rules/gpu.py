"""SC-4, GM-1, GM-2: DCGM samples, the job mapping and NVML process lists (``security.md``).

========  ==============================================================================
SC-4      a GPU with an empty ``hpc_job`` (no job mapped) busy above ``util_ratio``
          (``DCGM_FI_DEV_GPU_UTIL``) or ``sm_active_ratio`` (``DCGM_FI_PROF_SM_ACTIVE``) for
          ``min_seconds`` (CRITICAL: cost harvesting, a miner)
GM-1      ``DCGM_FI_DEV_FB_USED`` above ``fb_used_bytes`` on a GPU with no job,
          ``grace_seconds`` after its last job's allocation ended (the epilog ran): memory
          held past the job, readable by the next one; CRITICAL while NVML still lists a
          process on it
GM-2      NVML lists a compute process on GPU g whose Slurm job (from the process' cgroup) is
          not a job holding g (CRITICAL)
========  ==============================================================================

Inputs: ``gpu_samples`` rows (``ts, node, gpu, job_id, reported_util_ratio, sm_active_ratio,
fb_used_bytes``; ``job_id`` null when the mapping names no job), the platform's allocations
(prolog/epilog, :class:`GpuAllocation`) and ``gpu_processes`` rows (``ts, node, gpu, pid,
process_name, used_memory_bytes, job_id``: ``nvidia-smi --query-compute-apps`` with each
PID's job from ``/proc/<pid>/cgroup``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    GpuAllocation,
    JobSpan,
    enabled,
    merge,
    runs,
    span_text,
    telemetry_alert,
)
from hpcscope.model.alerts import Alert, RuleSpec, Severity

MIB = 1024 * 1024


def _mapped(allocations: Sequence[GpuAllocation], node: str, gpu: int, ts: datetime) -> set[str]:
    return {a.job_id for a in allocations if a.node == node and a.gpu == gpu and a.holds(ts)}


_BUSY = "__busy"


def _or_zero(samples: pl.DataFrame, column: str) -> pl.Expr:
    """``column`` with nulls (and a missing column) as 0: ``row.get(column) or 0.0``."""
    return pl.col(column).fill_null(0.0) if column in samples.columns else pl.lit(0.0)


def sc4_busy_without_job(spec: RuleSpec, samples: pl.DataFrame) -> list[Alert]:
    """SC-4 (CRITICAL): a GPU no job holds computes for ``min_seconds``."""
    out: list[Alert] = []
    if samples.height == 0:
        return out
    util, sm = spec.threshold("util_ratio"), spec.threshold("sm_active_ratio")
    busy_now = pl.col("job_id").is_null() & (
        (_or_zero(samples, "reported_util_ratio") > util)
        | (_or_zero(samples, "sm_active_ratio") > sm)
    )
    # only the GPUs busy with no job at some sample go through Python (the 15 minutes of an idle
    # GPU's samples, 450 per GPU at 2 s, were most of a run's GPU-rule time)
    frame = (
        samples.sort("node", "gpu", "ts")
        .with_columns(busy_now.alias(_BUSY))
        .filter(pl.col(_BUSY).any().over("node", "gpu"))
    )
    for (node, gpu), group in frame.group_by(["node", "gpu"], maintain_order=True):
        rows = group.to_dicts()
        busy = [bool(r[_BUSY]) for r in rows]
        for first, last in runs(busy):
            run = rows[first : last + 1]
            start, end = run[0]["ts"], run[-1]["ts"]
            if (end - start).total_seconds() < spec.threshold("min_seconds"):
                continue
            peak_util = max((r.get("reported_util_ratio") or 0.0) for r in run)
            peak_sm = max((r.get("sm_active_ratio") or 0.0) for r in run)
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=start,
                    last_seen=end,
                    node=str(node),
                    job=None,
                    gpu=int(gpu),
                    subject=None,
                    summary=(
                        f"GPU {gpu} of {node} busy with no job mapped (empty hpc_job) over "
                        f"{span_text(start, end)}: GPU_UTIL up to {peak_util:.0%}, SM active up "
                        f"to {peak_sm:.2f} (thresholds {util:.0%}, {sm:g})"
                    ),
                    source="gpu_samples",
                    position=f"node {node} gpu {gpu} {span_text(start, end)}",
                )
            )
    return out


def gm1_memory_after_epilog(
    spec: RuleSpec,
    samples: pl.DataFrame,
    allocations: Sequence[GpuAllocation],
    jobs: Mapping[str, JobSpan],
    processes: pl.DataFrame,
) -> list[Alert]:
    """GM-1 (HIGH, CRITICAL while a process is listed): GPU memory held after the epilog."""
    out: list[Alert] = []
    if samples.height == 0:
        return out
    grace = timedelta(seconds=spec.threshold("grace_seconds"))
    floor = spec.threshold("fb_used_bytes")
    listed: dict[tuple[str, int], list[dict[str, object]]] = {}
    for row in processes.to_dicts() if processes.height else []:
        listed.setdefault((str(row["node"]), int(row["gpu"])), []).append(row)
    # only samples above the floor can fire: the rest never reach Python
    frame = samples.filter(
        pl.col("job_id").is_null() & (_or_zero(samples, "fb_used_bytes") > floor)
    ).sort("node", "gpu", "ts")
    for (node, gpu), group in frame.group_by(["node", "gpu"], maintain_order=True):
        node, gpu = str(node), int(gpu)
        mine = [a for a in allocations if a.node == node and a.gpu == gpu]
        by_job: dict[str, list[dict[str, object]]] = {}
        for r in group.to_dicts():
            ts: datetime = r["ts"]
            if _mapped(mine, node, gpu, ts):
                continue
            ended = [a for a in mine if a.end is not None and a.end + grace <= ts]
            if not ended:
                continue
            last = max(ended, key=lambda a: (a.end, a.job_id))
            if any(last.end is not None and last.end < a.start <= ts for a in mine):
                continue
            by_job.setdefault(last.job_id, []).append(r | {"ended": last.end})
        for job_id, rows in sorted(by_job.items()):
            start, end = rows[0]["ts"], rows[-1]["ts"]
            procs = [
                p for p in listed.get((node, gpu), [])
                if start <= p["ts"] <= end  # type: ignore[operator]
            ]  # fmt: skip
            held = max(float(r["fb_used_bytes"]) for r in rows)  # type: ignore[arg-type]
            names = sorted({f"{p['process_name']} (pid {p['pid']})" for p in procs})
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=start,  # type: ignore[arg-type]
                    last_seen=end,  # type: ignore[arg-type]
                    node=node,
                    job=jobs.get(job_id),
                    gpu=gpu,
                    subject=None,
                    severity=Severity.CRITICAL if procs else None,
                    summary=(
                        f"GPU {gpu} of {node}: {held / MIB:.0f} MiB of framebuffer used "
                        f"{(start - rows[0]['ended']).total_seconds():.0f} s after job "  # type: ignore[operator]
                        f"{job_id}'s allocation ended, no job mapped (threshold "
                        f"{floor / MIB:.0f} MiB, {grace.total_seconds():.0f} s grace)"
                        + (f"; NVML still lists {', '.join(names)}" if names else "")
                    ),
                    source="gpu_samples",
                    position=f"node {node} gpu {gpu} {span_text(start, end)}",  # type: ignore[arg-type]
                )
            )
    return out


def gm2_foreign_process(
    spec: RuleSpec,
    processes: pl.DataFrame,
    allocations: Sequence[GpuAllocation],
    jobs: Mapping[str, JobSpan],
) -> list[Alert]:
    """GM-2 (CRITICAL): a compute process on a GPU its job does not hold."""
    out: list[Alert] = []
    if processes.height == 0:
        return out
    allowed = set(spec.items("allowed_processes"))
    for row in processes.sort("node", "gpu", "ts", "pid").to_dicts():
        node, gpu, ts = str(row["node"]), int(row["gpu"]), row["ts"]
        name = str(row.get("process_name") or "")
        if name.rsplit("/", 1)[-1] in allowed:
            continue
        mapped = _mapped(allocations, node, gpu, ts)
        job_id = row.get("job_id")
        if job_id in mapped or (job_id is None and not mapped):
            continue
        owner = jobs.get(str(job_id)) if job_id is not None else None
        if owner is None and mapped:
            owner = jobs.get(sorted(mapped)[0])
        used = row.get("used_memory_bytes")
        out.append(
            telemetry_alert(
                spec,
                first_seen=ts,
                last_seen=ts,
                node=node,
                job=owner,
                gpu=gpu,
                subject=f"pid {row['pid']}",
                summary=(
                    f"NVML lists {name or '?'} (pid {row['pid']}, job "
                    f"{job_id or 'none'}, {0 if used is None else used / MIB:.0f} MiB) on GPU "
                    f"{gpu} of {node}, which is mapped to "
                    f"{', '.join(sorted(mapped)) or 'no job'}"
                ),
                source="gpu_processes",
                position=f"node {node} gpu {gpu} pid {row['pid']}",
            )
        )
    return out


def gpu_alerts(
    samples: pl.DataFrame,
    processes: pl.DataFrame,
    allocations: Sequence[GpuAllocation],
    jobs: Mapping[str, JobSpan],
    *,
    rules: Mapping[str, RuleSpec],
) -> list[Alert]:
    """Every enabled GPU rule (SC-4, GM-1, GM-2)."""
    out: list[Alert] = []
    if (spec := enabled(rules, "SC-4")) is not None:
        out += sc4_busy_without_job(spec, samples)
    if (spec := enabled(rules, "GM-1")) is not None:
        out += gm1_memory_after_epilog(spec, samples, allocations, jobs, processes)
    if (spec := enabled(rules, "GM-2")) is not None:
        out += gm2_foreign_process(spec, processes, allocations, jobs)
    return merge(out)
