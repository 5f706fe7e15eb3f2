"""Stored data for web and service tests: jobs of several users with GPU samples.

Rows go through the real store (DuckDB in tmp_path) with the real schemas. Counters follow the
twin's profiles (reported vs real) so pages show meaningful figures.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.store import Store

#: job id -> (user, account, node, gpus, reported util, SM active)
JOBS: dict[str, tuple[str, str, str, list[int], float, float]] = {
    "101": ("alice", "vision", "gpu01", [0, 1, 2, 3], 0.98, 0.82),
    "102": ("bob", "nlp", "gpu01", [4, 5, 6, 7], 0.87, 0.19),
    "103": ("dave", "speech", "gpu02", [0, 1], 0.99, 0.80),
}


def populate(store: Store, *, now: datetime, seconds: int = 120, step: int = 2) -> None:
    """Write the jobs of :data:`JOBS` and ``seconds`` of samples ending at ``now``."""
    start = now - timedelta(seconds=seconds)
    jobs = pa.Table.from_pylist(
        [
            {
                "job_id": job_id,
                "user": user,
                "account": account,
                "partition": "gpu",
                "state": "RUNNING",
                "start_time": start,
                "gpus": len(gpus),
                "nodes": node,
                "name": f"job-{job_id}",
                "source": "test",
            }
            for job_id, (user, account, node, gpus, _, _) in JOBS.items()
        ],
        schema=JOB_SCHEMA,
    )
    store.upsert_jobs(jobs).result()
    rows = []
    for job_id, (_, _, node, gpus, util, sm) in JOBS.items():
        for gpu in gpus:
            for i in range(0, seconds, step):
                rows.append(
                    {
                        "ts": start + timedelta(seconds=i + step),
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
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()
