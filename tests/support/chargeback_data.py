"""Finished jobs of several users and accounts with kept summaries, for chargeback web tests.

Rows go through the real store and the real upkeep pass (``summarise_finished_jobs``). Job 204
spans the October/November boundary; each job has its own profile, so each waste cause shows:

* 201 alice/vision, gpu01 GPUs 0-3, 2 h healthy (95 % reported, 80 % real);
* 202 bob/nlp, gpu01 GPUs 4-7, 1 h data-starved (87 % reported, 19 % real);
* 203 dave/speech, gpu02 GPUs 0-1, 1 h allocated and idle;
* 204 alice/vision, gpu02 GPUs 0-7, 4 h from 31 October 22:00, failed (exit 1).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.store import Store

STEP_SECONDS = 60

#: job id -> (user, account, node, gpus, start, hours, state, exit code, reported, SM active)
JOBS: dict[str, tuple[str, str, str, list[int], datetime, float, str, int, float, float]] = {
    "201": ("alice", "vision", "gpu01", [0, 1, 2, 3], datetime(2026, 11, 10, 10), 2.0,
            "COMPLETED", 0, 0.95, 0.80),
    "202": ("bob", "nlp", "gpu01", [4, 5, 6, 7], datetime(2026, 11, 12, 8), 1.0,
            "COMPLETED", 0, 0.87, 0.19),
    "203": ("dave", "speech", "gpu02", [0, 1], datetime(2026, 11, 20, 9), 1.0,
            "COMPLETED", 0, 0.0, 0.0),
    "204": ("alice", "vision", "gpu02", list(range(8)), datetime(2026, 10, 31, 22), 4.0,
            "FAILED", 1, 0.9, 0.7),
}  # fmt: skip

#: job id -> the tokens that name it on a page (id, user, account)
JOB_TOKENS = {job_id: {job_id, spec[0], spec[1]} for job_id, spec in JOBS.items()}


def write_chargeback_jobs(store: Store) -> None:
    """Write :data:`JOBS`, their samples every minute, and their kept summaries."""
    records = []
    rows = []
    for job_id, (user, account, node, gpus, start, hours, state, code, util, sm) in JOBS.items():
        end = start + timedelta(hours=hours)
        records.append(
            {
                "job_id": job_id,
                "user": user,
                "account": account,
                "partition": "gpu",
                "state": state,
                "exit_code": code,
                "start_time": start,
                "end_time": end,
                "gpus": len(gpus),
                "nodes": node,
                "name": f"job-{job_id}",
                "source": "test",
            }
        )
        for gpu in gpus:
            for i in range(int(hours * 3600) // STEP_SECONDS):
                rows.append(
                    {
                        "ts": start + timedelta(seconds=i * STEP_SECONDS),
                        "node": node,
                        "gpu": gpu,
                        "job_id": job_id,
                        "reported_util_ratio": util,
                        "sm_active_ratio": sm,
                        "tensor_active_ratio": sm / 2,
                        "power_watts": 100 + 500 * sm,
                        "gpu_temperature_celsius": 40 + 30 * sm,
                        "sm_clock_hertz": 1.98e9,
                        "clock_throttle_reasons": 0,
                        "xid_last": 0,
                        "energy_joules": float(i * 300),
                    }
                )
    store.upsert_jobs(pa.Table.from_pylist(records, schema=JOB_SCHEMA)).result()
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()
    written = summarise_finished_jobs(
        store, now=datetime(2026, 12, 2), scrape_interval_seconds=float(STEP_SECONDS)
    )
    assert written == len(JOBS)
