"""Jobs with GPU samples shaped for the notification rules: an idle allocation, a job with low
real efficiency, one with idle GPUs beside working ones, a healthy one, a failed one with an
Xid. Rows go through the real store (samples make real 1-minute rollups).

The store finalises rollup minutes by the newest sample it has seen (``rollup_grace_seconds``),
as collection does: samples of several jobs over the same minutes go in one append
(:func:`write_jobs`), later minutes in later appends.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.store import Store

GIB = 2**30

#: job id -> (user, account, state, [(SM active, reported util) per GPU], xid on GPU 0)
SCENARIO: dict[str, tuple[str, str, str, list[tuple[float, float]], int]] = {
    "5001": ("alice", "vision", "RUNNING", [(0.0, 0.0), (0.0, 0.0)], 0),  # idle allocation
    "5002": ("bob", "nlp", "RUNNING", [(0.12, 0.95), (0.1, 0.97)], 0),  # low efficiency
    "5003": ("dave", "speech", "RUNNING", [(0.8, 0.99), (0.0, 0.0)], 0),  # one GPU idle
    "5004": ("alice", "vision", "RUNNING", [(0.8, 0.99), (0.82, 0.99)], 0),  # healthy
    "5005": ("bob", "nlp", "FAILED", [(0.7, 0.9), (0.7, 0.9)], 79),  # Xid, failed
}


def write_job(store: Store, job_id: str, **spec: Any) -> None:
    """One job: its record and samples (the arguments of :func:`job_rows`)."""
    write_jobs(store, [job_rows(job_id, **spec)])


def write_jobs(store: Store, jobs: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Several jobs' records, then all their samples in one append."""
    records = [record for record, _ in jobs]
    store.upsert_jobs(pa.Table.from_pylist(records, schema=JOB_SCHEMA)).result()
    rows = sorted((row for _, job in jobs for row in job), key=lambda r: r["ts"])
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()


def job_rows(
    job_id: str,
    *,
    user: str,
    account: str,
    state: str,
    gpus: Sequence[tuple[float, float]],
    now: datetime,
    minutes: int = 75,
    node: str = "gpu01",
    first_gpu: int = 0,
    xid: int = 0,
    step_seconds: int = 15,
    started: datetime | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One job's record and ``minutes`` of samples ending at ``now`` (the job started at
    ``started``, default when the samples start)."""
    start = now - timedelta(minutes=minutes)
    ended = state != "RUNNING"
    record = {
        "job_id": job_id,
        "user": user,
        "account": account,
        "partition": "gpu",
        "state": state,
        "start_time": started or start,
        "end_time": now if ended else None,
        "gpus": len(gpus),
        "nodes": node,
        "name": f"job-{job_id}",
        "source": "test",
    }
    rows = []
    count = minutes * 60 // step_seconds
    for index, (sm, util) in enumerate(gpus):
        for i in range(count):
            last = i == count - 1
            rows.append(
                {
                    "ts": start + timedelta(seconds=(i + 1) * step_seconds),
                    "node": node,
                    "gpu": first_gpu + index,
                    "job_id": job_id,
                    "reported_util_ratio": util,
                    "sm_active_ratio": sm,
                    "tensor_active_ratio": sm / 2,
                    "power_watts": 80 + 500 * sm,
                    "gpu_temperature_celsius": 35 + 30 * sm,
                    "sm_clock_hertz": 1.98e9,
                    "clock_throttle_reasons": 0,
                    "xid_last": xid if (index == 0 and last and xid) else 0,
                    "energy_joules": float(i * 100),
                    "fb_used_bytes": float(30 * GIB if sm > 0 else 0.5 * GIB),
                }
            )
    return record, rows


def write_scenario(store: Store, *, now: datetime) -> None:
    """Every job of :data:`SCENARIO`, on distinct GPUs of gpu01 and gpu02."""
    slots = [("gpu01", 0), ("gpu01", 2), ("gpu01", 4), ("gpu01", 6), ("gpu02", 0)]
    write_jobs(
        store,
        [
            job_rows(
                job_id,
                user=user,
                account=account,
                state=state,
                gpus=gpus,
                now=now,
                node=node,
                first_gpu=first,
                xid=xid,
            )
            for (job_id, (user, account, state, gpus, xid)), (node, first) in zip(
                SCENARIO.items(), slots, strict=True
            )
        ],
    )
