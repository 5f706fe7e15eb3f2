"""Chargeback read time on a generated store of kept summaries (issue 14 part 3).

    .venv/bin/python -m bench.chargeback_month --jobs 30000      # a busy month of a large site

The store: ``--jobs`` finished jobs over 60 days (random GPU counts 1-64, 8 GPUs a node, 10 min
to 2 days, every verdict and exit cause), each with its kept summary and one GPU row per GPU,
written through ``store/summaries.py`` as the upkeep pass writes them. Timed (median of
``--rounds``), as the web app runs them: the month by account for an admin, the month by user
of one account for its team lead, and the 6-month trend by account. The last line printed is
one JSON object with the seconds and the sizes. Target: each read <= 2 s at 30,000 jobs on
one idle core. Measured on 1 December 2026 on 2 cores shared by ~8 engineers (load 17):
month by account 5.6 s (15,009 jobs, 240 k GPU rows in November), account report 0.58 s,
6-month trend 12.3 s (30,000 jobs, 481 k GPU rows): the target is not shown to be met yet.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from hpcscope.analysis.chargeback.aggregate import GroupBy
from hpcscope.analysis.chargeback.periods import parse_period
from hpcscope.model.access import Principal, Role
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.model.topology import load_topology
from hpcscope.service.chargeback import reads
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.store import Store
from hpcscope.store.summaries import write_summaries

ACCOUNTS = [f"team{i:02d}" for i in range(20)]
VERDICTS = ["healthy", "idle", "straggler", "waiting_at_barrier", "busy_not_computing",
            "low_efficiency", "no_data"]  # fmt: skip
CAUSES = ["success"] * 8 + ["user_error", "node_failure_xid", "timeout", "cancelled"]
FIRST = datetime(2026, 10, 1)


def generate(store: Store, *, jobs: int, seed: int) -> int:
    """Write ``jobs`` summaries and their GPU rows; returns the GPU rows written."""
    rng = np.random.default_rng(seed)
    gpu_rows = 0
    for offset in range(0, jobs, 2000):
        summaries: list[dict[str, Any]] = []
        gpus: list[dict[str, Any]] = []
        for i in range(offset, min(jobs, offset + 2000)):
            count = int(rng.choice([1, 2, 4, 8, 16, 64]))
            elapsed = float(rng.uniform(600, 2 * 86_400))
            start = FIRST + timedelta(seconds=float(rng.uniform(0, 60 * 86_400)))
            sm = float(rng.uniform(0, 0.9))
            job_id = str(1_000_000 + i)
            summaries.append(
                {
                    "job_id": job_id, "summarised_at": start, "user": f"user{i % 200}",
                    "account": ACCOUNTS[i % len(ACCOUNTS)], "partition": "gpu",
                    "state": "COMPLETED", "exit_cause": CAUSES[i % len(CAUSES)],
                    "start_time": start, "end_time": start + timedelta(seconds=elapsed),
                    "elapsed_seconds": elapsed, "gpus_allocated": count, "gpus_observed": count,
                    "allocated_gpu_seconds": count * elapsed,
                    "observed_gpu_seconds": count * elapsed * 0.98,
                    "useful_gpu_seconds": count * elapsed * 0.98 * sm, "verdict": "healthy",
                }
            )  # fmt: skip
            for g in range(count):
                gpus.append(
                    {
                        "job_id": job_id, "node": f"gpu{(i + g // 8) % 2 + 1:02d}", "gpu": g % 8,
                        "observed_seconds": elapsed * 0.98, "useful_seconds": elapsed * 0.98 * sm,
                        "throttle_reasons": 0, "verdict": VERDICTS[(i + g) % len(VERDICTS)],
                    }
                )  # fmt: skip
        gpu_rows += len(gpus)
        write_summaries(
            store,
            pa.Table.from_pylist(summaries, schema=JOB_SUMMARY_SCHEMA),
            pa.Table.from_pylist(gpus, schema=JOB_GPU_SUMMARY_SCHEMA),
        ).result()
    return gpu_rows


def _median(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    topology = load_topology(bundled_topology())
    settings = Settings()
    admin = Principal("admin", Role.ADMIN)
    lead = Principal("lead", Role.TEAM_LEAD, frozenset({ACCOUNTS[0]}))
    november = parse_period("2026-11")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.duckdb")
        gpu_rows = generate(store, jobs=args.jobs, seed=args.seed)
        month = reads.report(
            store, admin, topology, settings, period=november, by=GroupBy.ACCOUNT
        )  # fmt: skip
        results = {
            "jobs": args.jobs,
            "gpu_rows": gpu_rows,
            "november_jobs": month.total.jobs,
            "month_by_account_s": _median(
                lambda: reads.report(
                    store, admin, topology, settings, period=november, by=GroupBy.ACCOUNT
                ),
                args.rounds,
            ),
            "account_report_s": _median(
                lambda: reads.report(
                    store,
                    lead,
                    topology,
                    settings,
                    period=november,
                    by=GroupBy.USER,
                    account=ACCOUNTS[0],
                ),
                args.rounds,
            ),
            "trend_6_months_s": _median(
                lambda: reads.trend(
                    store,
                    admin,
                    topology,
                    settings,
                    period=november,
                    months=6,
                    by=GroupBy.ACCOUNT,
                ),
                args.rounds,
            ),
        }
        store.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
