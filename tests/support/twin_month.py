"""A month (and some) of the twin's jobs, written into a real store as the collector would.

The twin's simulated Slurm (:class:`hpcscope.twin.scheduler.Scheduler`) runs random jobs of
every workload profile (healthy, data-starved, straggler, idle allocation, failing with an Xid)
from several teams on the 2 x 8 H100 topology; every ``step_seconds`` each running GPU's
counters come from the twin's own GPU model (:class:`hpcscope.twin.workloads.GpuPhysics`), in
the units ingest stores. Job records go in as Slurm reports them. Then the upkeep pass writes
the kept summaries, exactly as a server does.

A GPU is sampled only at instants ``t`` with ``t + step <= end`` of its job, and only in jobs
long enough for two samples (a lone sample weighs the 3-interval cap), so each sample's weight
stays inside the job: observed time never exceeds the allocation, as with a scrape interval
much shorter than jobs. Shorter jobs have no samples (their time is unmeasured).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.model.timeutil import epoch_seconds, from_epoch_seconds
from hpcscope.model.topology import load_topology
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import bundled_topology
from hpcscope.store import Store
from hpcscope.twin.cluster import job_gpu_shares
from hpcscope.twin.scheduler import REPAIR_SECONDS, JobState, Scheduler, SimJob
from hpcscope.twin.workloads import GpuCounters, GpuPhysics

FIRST = datetime(2026, 10, 28)
LAST = datetime(2026, 12, 3)


@dataclass(frozen=True, slots=True)
class TwinMonth:
    """What was written: the scheduler's finished jobs and the sample count."""

    jobs: list[SimJob]
    samples: int
    summaries: int


def _row(ts: datetime, node: str, gpu: int, job_id: str, c: GpuCounters) -> dict[str, Any]:
    """One ``gpu_samples`` row in stored units (what ingest makes of dcgm-exporter's page)."""
    mib = float(2**20)
    return {
        "ts": ts,
        "node": node,
        "gpu": gpu,
        "job_id": job_id,
        "reported_util_ratio": c.gpu_util_percent / 100.0,
        "sm_active_ratio": c.sm_active_ratio,
        "sm_occupancy_ratio": c.sm_occupancy_ratio,
        "tensor_active_ratio": c.tensor_active_ratio,
        "dram_active_ratio": c.dram_active_ratio,
        "gr_engine_active_ratio": c.gr_engine_active_ratio,
        "fb_used_bytes": c.fb_used_mib * mib,
        "fb_free_bytes": c.fb_free_mib * mib,
        "power_watts": c.power_watts,
        "energy_joules": c.energy_millijoules / 1000.0,
        "gpu_temperature_celsius": c.gpu_temp_celsius,
        "memory_temperature_celsius": c.memory_temp_celsius,
        "sm_clock_hertz": c.sm_clock_mhz * 1e6,
        "clock_throttle_reasons": c.clock_throttle_reasons,
        "xid_last": c.xid_last,
    }


def _record(job: SimJob, cluster: str) -> dict[str, Any]:
    return {
        "job_id": str(job.job_id),
        "cluster": cluster,
        "name": job.name,
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "qos": job.qos,
        "state": job.state.value,
        "exit_code": job.exit_code,
        "submit_time": from_epoch_seconds(job.submit_time),
        "start_time": None if job.start_time is None else from_epoch_seconds(job.start_time),
        "end_time": None if job.end_time is None else from_epoch_seconds(job.end_time),
        "time_limit_seconds": job.time_limit_minutes * 60,
        "gpus": job.gpus,
        "nodes": ",".join(job.nodes),
        "source": "twin",
    }


def write_twin_month(
    store: Store,
    work_dir: Path,
    *,
    first: datetime = FIRST,
    last: datetime = LAST,
    step_seconds: int = 600,
    seed: int = 14,
    arrivals_per_hour: float = 2.0,
) -> TwinMonth:
    """Run the twin's scheduler from ``first`` to ``last``, store its finished jobs and their
    GPUs' samples, and summarise them (module docstring)."""
    topology = load_topology(bundled_topology())
    t0, t1 = epoch_seconds(first), epoch_seconds(last)
    scheduler = Scheduler(
        topology, work_dir, start_time=t0, seed=seed, arrivals_per_hour=arrivals_per_hour
    )
    rng = np.random.default_rng(seed)
    physics = {(g.node, g.index): GpuPhysics(g.model) for g in topology.gpus}
    rows: list[dict[str, Any]] = []
    written = 0
    finished: list[SimJob] = []
    now = t0
    while now <= t1:
        scheduler.tick(now)
        ts = from_epoch_seconds(now)
        for node in topology.nodes:
            held = scheduler.running_on(node.name)
            for gpu in node.gpus:
                job = held.get(gpu.index)
                state = physics[(node.name, gpu.index)]
                if job is None or job.start_time is None:
                    continue  # an idle GPU's counters belong to no job: not needed here
                state.xid_last = scheduler.xid_of(node.name, gpu.index, now)
                counters = state.step(
                    job_gpu_shares(topology, scheduler, job, node.name, gpu.index, now),
                    dt_seconds=step_seconds,
                    rng=rng,
                )
                end = job.start_time + min(job.duration_seconds, job.time_limit_minutes * 60.0)
                if job.fault_time is not None:
                    end = min(end, job.fault_time + 30.0)
                # two samples at least: a lone sample would weigh the 3-interval cap
                if now + step_seconds <= end and job.start_time + 2 * step_seconds <= end:
                    rows.append(_row(ts, node.name, gpu.index, str(job.job_id), counters))
        if len(rows) >= 200_000:
            store.append(
                "gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)
            ).result()
            written += len(rows)
            rows = []
        # the scheduler keeps every job it ever ran: hand the long-finished ones over here
        # (its per-tick scans would grow with the month)
        for job_id, job in list(scheduler.jobs.items()):
            if job.end_time is not None and now - job.end_time > 2 * REPAIR_SECONDS:
                finished.append(scheduler.jobs.pop(job_id))
        now += step_seconds
    if rows:
        store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()
        written += len(rows)
    finished += [j for j in scheduler.jobs.values() if j.end_time is not None]
    finished = [
        j
        for j in finished
        if j.state is not JobState.RUNNING and j.end_time is not None and j.end_time <= t1
    ]
    records = [_record(j, topology.slurm_cluster_name) for j in finished]
    store.upsert_jobs(pa.Table.from_pylist(records, schema=JOB_SCHEMA)).result()
    count = summarise_finished_jobs(
        store,
        now=from_epoch_seconds(t1 + 86_400),
        scrape_interval_seconds=float(step_seconds),
        max_jobs=100_000,
    )
    return TwinMonth(jobs=finished, samples=written, summaries=count)
