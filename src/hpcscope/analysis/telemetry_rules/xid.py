"""GM-4: a burst of Xid 13/31/43 on one GPU with a new job or an unknown binary.

``DCGM_EXP_XID_ERRORS_COUNT{xid}`` (``gpu_xid_counts``) is the number of Xids of one code a GPU
reported within dcgm-exporter's window (``--xid-count-window-size``; the rule wants 2 minutes).
Xid 13 (graphics engine exception), 31 (GPU memory page fault) and 43 (GPU stopped processing)
are what a program probing memory it does not own leaves behind (NVIDIA's catalogue calls them
"usually an application bug"). One job's bug repeats them too, so the burst alone does not fire:

========  ==============================================================================
GM-4      at some scrape the Xids of the ``xids`` list on one GPU sum to ``min_count`` or
          more, and either the GPU's job started at most ``new_job_seconds`` before the
          burst, or NVML lists a compute process on that GPU within ``window_seconds`` of it
          whose name is not in ``known_binaries`` (MEDIUM)
========  ==============================================================================

One alert per GPU and burst (scrapes over the threshold, each within ``window_seconds`` of the
previous one: the gauge counts a sliding window, so they share errors); the job is the one the
GPU's series names (``hpc_job``) or, without it, the job the allocations map to the GPU. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    GpuAllocation,
    JobSpan,
    span_text,
    telemetry_alert,
)
from hpcscope.model.alerts import Alert, RuleSpec
from hpcscope.model.xid import describe_xid


def _job_of(
    job_ids: Sequence[str | None],
    allocations: Sequence[GpuAllocation],
    node: str,
    gpu: int,
    ts: datetime,
) -> str | None:
    named = sorted({j for j in job_ids if j is not None})
    if named:
        return named[0]
    mapped = sorted(a.job_id for a in allocations if a.node == node and a.gpu == gpu
                    and a.holds(ts))  # fmt: skip
    return mapped[0] if mapped else None


# Rows of the per-scrape frame as Polars gives them (``to_dicts``): node, gpu, ts, total,
# job_id, codes.
def _bursts(hot: list[dict[str, Any]], window: timedelta) -> list[list[dict[str, Any]]]:
    """Scrapes over the threshold, in time order, grouped into bursts: the next one within
    the exporter's window of the last shares its errors (the gauge counts a sliding window)."""
    out: list[list[dict[str, Any]]] = []
    for row in hot:
        if out and row["ts"] - out[-1][-1]["ts"] <= window:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def gm4_xid_burst(
    spec: RuleSpec,
    counts: pl.DataFrame,
    processes: pl.DataFrame,
    allocations: Sequence[GpuAllocation],
    jobs: Mapping[str, JobSpan],
) -> list[Alert]:
    """GM-4 (module docstring)."""
    out: list[Alert] = []
    if counts.height == 0:
        return out
    watched = {int(x) for x in spec.items("xids")}
    known = set(spec.items("known_binaries"))
    floor = spec.threshold("min_count")
    window = timedelta(seconds=spec.threshold("window_seconds"))
    new_job = timedelta(seconds=spec.threshold("new_job_seconds"))
    frame = counts.filter(pl.col("xid").is_in(sorted(watched)))
    if frame.height == 0:
        return out
    per_scrape = (
        frame.group_by(["node", "gpu", "ts"])
        .agg(pl.col("xid_count").sum().alias("total"), pl.col("job_id"),
             pl.struct("xid", "xid_count").alias("codes"))
        .sort("node", "gpu", "ts")
    )  # fmt: skip
    listed: dict[tuple[str, int], list[dict[str, object]]] = {}
    for row in processes.to_dicts() if processes.height else []:
        listed.setdefault((str(row["node"]), int(row["gpu"])), []).append(row)
    for (node, gpu), group in per_scrape.group_by(["node", "gpu"], maintain_order=True):
        node, gpu = str(node), int(gpu)
        hot = [r for r in group.to_dicts() if float(r["total"]) >= floor]
        for burst in _bursts(hot, window):
            start, end = burst[0]["ts"], burst[-1]["ts"]
            job_id = _job_of([j for r in burst for j in r["job_id"]], allocations, node, gpu,
                             start)  # fmt: skip
            job = jobs.get(job_id) if job_id is not None else None
            reasons: list[str] = []
            if job is not None and job.start is not None and start - job.start <= new_job:
                age = (start - job.start).total_seconds()
                reasons.append(f"job {job.job_id} started {age:.0f} s before")
            strangers = sorted({
                f"{p['process_name']} (pid {p['pid']})"
                for p in listed.get((node, gpu), [])
                if start - window <= p["ts"] <= end
                and str(p.get("process_name") or "").rsplit("/", 1)[-1] not in known
            })  # fmt: skip
            if strangers:
                reasons.append(f"unknown binary {', '.join(strangers)} on the GPU")
            if not reasons:
                continue
            peak = max(burst, key=lambda r: float(r["total"]))
            codes = ", ".join(
                f"Xid {c['xid']} ({describe_xid(int(c['xid']))}) x{c['xid_count']:.0f}"
                for c in sorted(peak["codes"], key=lambda c: int(c["xid"]))
            )
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=start,
                    last_seen=end,
                    node=node,
                    job=job,
                    gpu=gpu,
                    subject=None,
                    summary=(
                        f"GPU {gpu} of {node}: {peak['total']:.0f} Xids within the exporter's "
                        f"window ({codes}; threshold {floor:.0f}) over {span_text(start, end)}; "
                        + "; ".join(reasons)
                    ),
                    source="gpu_xid_counts",
                    position=f"node {node} gpu {gpu} {span_text(start, end)}",
                )
            )
    return out
