"""A small, realistic cluster state written into a real store, for diagram tests.

Until the twin and the collector fill a store by themselves, diagram tests need rows shaped
exactly like theirs: dcgm-exporter counters per GPU per scrape (units converted as ingest
does), Slurm job records, open allocations from the prolog mapping, scrape records. The
scenario is the seed's cluster at a glance, on the default 2 x 8 topology:

* job 4410001 (alice, account vision): gpu01 GPUs 0-3, data-starved: 87 % reported, 19 % real.
* job 4410003 (dave, account speech): gpu01 GPUs 4-5, allocated but idle.
* gpu01 GPUs 6-7: no job.
* job 4410002 (bob, account nlp): all of gpu02, GPU 2 a straggler computing (92 % SM active)
  while the seven others spin at the barrier (97 % reported, 55 % real).
* jobs 4410004 (alice) and 4410005 (bob) pending.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa

from hpcscope.model.schemas import (
    GPU_METRICS,
    GPU_SAMPLE_SCHEMA,
    JOB_ALLOCATION_SCHEMA,
    JOB_SCHEMA,
    SCRAPE_SCHEMA,
)
from hpcscope.store import Store

NOW = datetime(2026, 10, 2, 12, 0, 0)
STEP = timedelta(seconds=15)
SAMPLES = 40  # ten minutes of scrapes


@dataclass(frozen=True, slots=True)
class Profile:
    util: float
    sm: float
    tensor: float
    power: float
    temp: float


DATA_STARVED = Profile(0.87, 0.19, 0.12, 260.0, 48.0)
STRAGGLER = Profile(0.99, 0.92, 0.71, 650.0, 71.0)
AT_BARRIER = Profile(0.97, 0.55, 0.40, 420.0, 62.0)
IDLE_ALLOCATED = Profile(0.0, 0.0, 0.0, 72.0, 34.0)
IDLE = Profile(0.0, 0.0, 0.0, 70.0, 33.0)

#: (node, gpu) -> (job id or None, profile)
PLACEMENT: dict[tuple[str, int], tuple[str | None, Profile]] = {
    **{("gpu01", g): ("4410001", DATA_STARVED) for g in range(4)},
    **{("gpu01", g): ("4410003", IDLE_ALLOCATED) for g in (4, 5)},
    **{("gpu01", g): (None, IDLE) for g in (6, 7)},
    **{("gpu02", g): ("4410002", STRAGGLER if g == 2 else AT_BARRIER) for g in range(8)},
}

JOBS = [
    # job_id, name, user, account, state, submit offset, start offset (minutes before NOW), gpus
    ("4410001", "resnet-imagenet", "alice", "vision", "RUNNING", 14, 11, 4, "gpu01"),
    ("4410002", "llama-8b-pretrain", "bob", "nlp", "RUNNING", 20, 12, 8, "gpu02"),
    ("4410003", "whisper-notebook", "dave", "speech", "RUNNING", 13, 12, 2, "gpu01"),
    ("4410004", "resnet-sweep", "alice", "vision", "PENDING", 6, None, 8, None),
    ("4410005", "llama-eval", "bob", "nlp", "PENDING", 3, None, 8, None),
]


def _sample_rows() -> dict[str, list[object]]:
    columns: dict[str, list[object]] = {field.name: [] for field in GPU_SAMPLE_SCHEMA}
    start = NOW - STEP * (SAMPLES - 1)
    for i in range(SAMPLES):
        ts = start + STEP * i
        for (node, gpu), (job, p) in sorted(PLACEMENT.items()):
            row: dict[str, object] = {
                "ts": ts,
                "node": node,
                "gpu": gpu,
                "gpu_instance_id": None,
                "job_id": job,
                "reported_util_ratio": p.util,
                "sm_active_ratio": p.sm,
                "sm_occupancy_ratio": p.sm * 0.4,
                "tensor_active_ratio": p.tensor,
                "dram_active_ratio": p.sm * 0.5,
                "gr_engine_active_ratio": p.util,
                "fb_used_bytes": 60e9 if job else 0.5e9,
                "fb_free_bytes": 81559 * 2**20 - (60e9 if job else 0.5e9),
                "power_watts": p.power,
                "energy_joules": 1e6 + p.power * 15 * i,
                "gpu_temperature_celsius": p.temp,
                "memory_temperature_celsius": p.temp + 4,
                "sm_clock_hertz": 1.98e9 if p.sm else 0.345e9,
                "clock_throttle_reasons": 0,
                "xid_last": 0,
                "pcie_tx_bytes_per_second": 1e9 * p.util,
                "pcie_rx_bytes_per_second": 2e9 * p.util,
                "nvlink_tx_bytes_per_second": 120e9 * p.sm if job else 0.0,
                "nvlink_rx_bytes_per_second": 118e9 * p.sm if job else 0.0,
            }
            for name in columns:
                columns[name].append(row[name])
    assert set(columns) == {"ts", "node", "gpu", "gpu_instance_id", "job_id"} | {
        m.column for m in GPU_METRICS
    }
    return columns


def write_fleet(store: Store, *, now: datetime = NOW) -> None:
    """Write the scenario (shifted so that its last scrape is at ``now``) and wait for it."""
    shift = now - NOW
    samples = _sample_rows()
    samples["ts"] = [ts + shift for ts in samples["ts"]]  # type: ignore[operator]
    store.append("gpu_samples", pa.table(samples, schema=GPU_SAMPLE_SCHEMA))
    jobs: dict[str, list[object]] = {field.name: [] for field in JOB_SCHEMA}
    allocations: dict[str, list[object]] = {field.name: [] for field in JOB_ALLOCATION_SCHEMA}
    for job_id, name, user, account, state, submitted, started, gpus, nodes in JOBS:
        start = now - timedelta(minutes=started) if started is not None else None
        record = {
            "job_id": job_id,
            "cluster": "demo",
            "name": name,
            "user": user,
            "account": account,
            "partition": "gpu",
            "qos": "normal",
            "state": state,
            "exit_code": None,
            "submit_time": now - timedelta(minutes=submitted),
            "eligible_time": now - timedelta(minutes=submitted),
            "start_time": start,
            "end_time": None,
            "time_limit_seconds": 86400,
            "gpus": gpus,
            "nodes": nodes,
            "source": "test-fleet",
        }
        for key in jobs:
            jobs[key].append(record[key])
        for (node, gpu), (holder, _) in sorted(PLACEMENT.items()):
            if holder == job_id:
                for key, value in {
                    "job_id": job_id,
                    "node": node,
                    "gpu": gpu,
                    "gpu_instance_id": None,
                    "start_time": start,
                    "end_time": None,
                }.items():
                    allocations[key].append(value)
    store.upsert_jobs(pa.table(jobs, schema=JOB_SCHEMA))
    store.append("job_allocations", pa.table(allocations, schema=JOB_ALLOCATION_SCHEMA))
    scrapes: dict[str, list[object]] = {field.name: [] for field in SCRAPE_SCHEMA}
    for i in range(SAMPLES):
        ts = now - STEP * (SAMPLES - 1 - i)
        for node in ("gpu01", "gpu02"):
            failed = node == "gpu02" and i == 5
            for key, value in {
                "ts": ts,
                "target": f"127.0.0.1:94{node[-2:]}",
                "exporter": "dcgm-exporter",
                "node": node,
                "ok": not failed,
                "duration_seconds": 0.012,
                "samples": 0 if failed else 8 * 19,
                "rejected_lines": 0,
                "error": "timeout after 5.0 s" if failed else None,
            }.items():
                scrapes[key].append(value)
    store.append("scrapes", pa.table(scrapes, schema=SCRAPE_SCHEMA))
    store.flush()


def write_scaled_fleet(
    store: Store, nodes: list[str], *, now: datetime, seed: int = 7, gpus_per_node: int = 8
) -> int:
    """A busy large cluster: jobs of 1 to 8 whole nodes with mixed profiles, a few idle nodes.

    Returns:
        The number of jobs written. Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    profiles = [DATA_STARVED, AT_BARRIER, STRAGGLER, IDLE_ALLOCATED]
    users = [("alice", "vision"), ("bob", "nlp"), ("dave", "speech")]
    placement: dict[tuple[str, int], tuple[str | None, Profile]] = {}
    jobs: dict[str, list[object]] = {field.name: [] for field in JOB_SCHEMA}
    allocations: dict[str, list[object]] = {field.name: [] for field in JOB_ALLOCATION_SCHEMA}
    i, count = 0, 0
    while i < len(nodes):
        width = rng.randint(1, 8)
        members = nodes[i : i + width]
        i += width
        if rng.random() < 0.1:
            for node in members:
                for gpu in range(gpus_per_node):
                    placement[(node, gpu)] = (None, IDLE)
            continue
        count += 1
        job_id = str(5500000 + count)
        user, account = rng.choice(users)
        profile = rng.choice(profiles)
        start = now - timedelta(minutes=rng.randint(5, 600))
        record: dict[str, object] = {
            "job_id": job_id,
            "cluster": "scale",
            "name": f"job-{count}",
            "user": user,
            "account": account,
            "partition": "gpu",
            "qos": "normal",
            "state": "RUNNING",
            "exit_code": None,
            "submit_time": start - timedelta(minutes=rng.randint(0, 90)),
            "eligible_time": None,
            "start_time": start,
            "end_time": None,
            "time_limit_seconds": 172800,
            "gpus": width * gpus_per_node,
            "nodes": ",".join(members),
            "source": "test-fleet",
        }
        for key, value in record.items():
            jobs[key].append(value)
        slow = rng.randrange(width * gpus_per_node)
        for n, node in enumerate(members):
            for gpu in range(gpus_per_node):
                p = (
                    STRAGGLER
                    if profile is AT_BARRIER and n * gpus_per_node + gpu == slow
                    else profile
                )
                placement[(node, gpu)] = (job_id, p)
                for key, value in {
                    "job_id": job_id,
                    "node": node,
                    "gpu": gpu,
                    "gpu_instance_id": None,
                    "start_time": start,
                    "end_time": None,
                }.items():
                    allocations[key].append(value)
    columns: dict[str, list[object]] = {field.name: [] for field in GPU_SAMPLE_SCHEMA}
    for step in range(4):
        ts = now - STEP * (3 - step)
        for (node, gpu), (job, p) in placement.items():
            jitter = rng.uniform(-0.02, 0.02)
            row = {
                "ts": ts,
                "node": node,
                "gpu": gpu,
                "gpu_instance_id": None,
                "job_id": job,
                "reported_util_ratio": min(1.0, max(0.0, p.util + jitter)),
                "sm_active_ratio": min(1.0, max(0.0, p.sm + jitter)),
                "tensor_active_ratio": p.tensor,
                "power_watts": p.power,
                "gpu_temperature_celsius": p.temp,
                "xid_last": 0,
            }
            for name in columns:
                columns[name].append(row.get(name))
    store.append("gpu_samples", pa.table(columns, schema=GPU_SAMPLE_SCHEMA))
    store.upsert_jobs(pa.table(jobs, schema=JOB_SCHEMA))
    store.append("job_allocations", pa.table(allocations, schema=JOB_ALLOCATION_SCHEMA))
    store.flush()
    return count


#: A job seen on a GPU that the scheduler never reported (no user, no account).
UNKNOWN_JOB = "9990001"


def write_unknown_job(store: Store, *, now: datetime) -> None:
    """Six samples, 10 s apart up to ``now``, of :data:`UNKNOWN_JOB` on gpu01 GPU 7 (a GPU
    the fleet leaves idle)."""
    rows: dict[str, list[object]] = {field.name: [] for field in GPU_SAMPLE_SCHEMA}
    for i in range(6):
        for field in GPU_SAMPLE_SCHEMA:
            rows[field.name].append(None)
        rows["ts"][-1] = now - timedelta(seconds=10 * (5 - i))
        rows["node"][-1] = "gpu01"
        rows["gpu"][-1] = 7
        rows["job_id"][-1] = UNKNOWN_JOB
        rows["reported_util_ratio"][-1] = 0.9
        rows["sm_active_ratio"][-1] = 0.5
    store.append("gpu_samples", pa.table(rows, schema=GPU_SAMPLE_SCHEMA)).result()
