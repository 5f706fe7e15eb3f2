"""Read-path budgets (issue 16 part 4) on a generated store, with and without kept summaries.

    .venv/bin/python -m bench.read_path --scale 0.05      # a quick run (prints the scale)
    .venv/bin/python -m bench.read_path --scale 1         # the full size
    .venv/bin/python -m bench.read_path --backend prometheus --minutes 6

The store (seeded, ``--seed``) on the 128-node topology: one big finished job of
``1024 x scale`` GPUs sampled every second for ``24 h x scale``, ``10,000 x scale`` finished
jobs of 8 GPUs x 10 minutes at 15 s, one running 16-GPU job (the last 10 minutes at 1 s) so the
overview has live work, and the other 1,008 GPUs reporting idle for the last minute, so the
diagram draws 1,024 live GPUs. Budgets: job report <= 1 s, overview <= 200 ms, job list <=
200 ms, diagram (live state at 128 nodes) <= 300 ms.

Each query is timed (median of ``--rounds``) after the upkeep pass wrote the summaries, and
(``--raw``, the default below scale 0.5) before it too, when every read recomputes from raw
samples. The last line printed is one JSON object: ``job_report_s``, ``overview_s``,
``job_list_s``, ``diagram_s``, ``job_list_jobs``, the ``*_raw_s`` figures without summaries and
their ratios, and the scale. ``--backend prometheus`` times the same reads on the prometheus
backend (``bench/read_path_engine.py``).
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

from hpcscope.model.access import Principal, Role
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.store import Store

ADMIN = Principal(name="admin", role=Role.ADMIN)
BIG_JOB = "5000000"
RUNNING_JOB = "6000000"
SMALL_GPUS, SMALL_SECONDS, SMALL_STEP = 8, 600, 15


def _samples(
    rng: np.random.Generator,
    *,
    job_id: str,
    nodes: list[str],
    gpus_per_node: int,
    start: datetime,
    seconds: int,
    step: int,
) -> pa.Table:
    """Samples of one job: every GPU of ``nodes`` every ``step`` seconds for ``seconds``."""
    times = np.arange(0, seconds, step, dtype=np.int64)
    gpus = len(nodes) * gpus_per_node
    n = len(times) * gpus
    base = np.datetime64(start, "us")
    ts = np.tile(base + times * 1_000_000, gpus)
    node = np.repeat(np.array(nodes, dtype=object), gpus_per_node * len(times))
    gpu = np.tile(np.repeat(np.arange(gpus_per_node, dtype=np.int16), len(times)), len(nodes))
    level = np.repeat(rng.uniform(0.2, 0.9, gpus), len(times))
    columns: dict[str, Any] = {
        "ts": pa.array(ts, pa.timestamp("us")),
        "node": pa.array(node, pa.string()),
        "gpu": pa.array(gpu, pa.int16()),
        "job_id": pa.array(np.full(n, job_id, dtype=object), pa.string()),
        "reported_util_ratio": np.clip(level + 0.1 + rng.normal(0, 0.02, n), 0, 1),
        "sm_active_ratio": np.clip(level + rng.normal(0, 0.03, n), 0, 1),
        "tensor_active_ratio": np.clip(level / 2 + rng.normal(0, 0.02, n), 0, 1),
        "power_watts": 150 + 500 * level,
        "sm_clock_hertz": np.full(n, 1.98e9),
        "fb_used_bytes": np.full(n, 40e9),
        "energy_joules": np.tile(times.astype(np.float64), gpus) * 400.0,
        "gpu_temperature_celsius": 40 + 30 * level,
        "clock_throttle_reasons": np.zeros(n, dtype=np.int64),
        "xid_last": np.zeros(n, dtype=np.int64),
    }
    arrays = [
        columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in GPU_SAMPLE_SCHEMA
    ]
    return pa.Table.from_arrays(
        [
            pa.array(a, f.type) if not isinstance(a, pa.Array) else a
            for a, f in zip(arrays, GPU_SAMPLE_SCHEMA, strict=True)
        ],
        schema=GPU_SAMPLE_SCHEMA,
    )


def generate_finished(
    store: Store,
    *,
    scale: float,
    seed: int,
    now: datetime,
    nodes: list[str] | None = None,
    rng: np.random.Generator | None = None,
) -> int:
    """The ``10,000 x scale`` finished jobs of 8 GPUs x 10 minutes at 15 s (records and raw
    samples, not yet summarised); returns how many."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    nodes = nodes if nodes is not None else [f"gpu{i + 1:03d}" for i in range(128)]
    small_jobs = max(100, int(10_000 * scale))
    records: list[dict[str, object]] = []
    small_start = now - timedelta(days=30)
    # 11 minutes apart, closer when they would not all end a day before ``now`` (scale 1)
    spacing = min(timedelta(minutes=11), timedelta(days=29) / small_jobs)
    batch: list[pa.Table] = []
    for i in range(small_jobs):
        start = small_start + spacing * i
        job_id = str(1_000_000 + i)
        records.append(
            {
                "job_id": job_id,
                "user": ["alice", "bob", "carol", "dave"][i % 4],
                "account": ["vision", "nlp", "speech"][i % 3],
                "partition": "gpu",
                "state": "COMPLETED" if i % 10 else "FAILED",
                "exit_code": 0 if i % 10 else 1,
                "start_time": start,
                "end_time": start + timedelta(seconds=SMALL_SECONDS),
                "gpus": SMALL_GPUS,
                "source": "bench",
            }
        )
        batch.append(
            _samples(
                rng,
                job_id=job_id,
                nodes=[nodes[i % len(nodes)]],
                gpus_per_node=SMALL_GPUS,
                start=start,
                seconds=SMALL_SECONDS,
                step=SMALL_STEP,
            )
        )
        if len(batch) == 200:
            store.append("gpu_samples", pa.concat_tables(batch)).result()
            batch = []
    if batch:
        store.append("gpu_samples", pa.concat_tables(batch)).result()
    store.upsert_jobs(pa.Table.from_pylist(records, schema=JOB_SCHEMA)).result()
    return small_jobs


def generate(store: Store, *, scale: float, seed: int, now: datetime) -> dict[str, int]:
    """Write the benchmark's jobs and samples (module docstring); returns their sizes."""
    rng = np.random.default_rng(seed)
    big_gpus = max(8, round(1024 * scale / 8) * 8)
    big_seconds = max(600, int(86_400 * scale))
    big_start = now - timedelta(seconds=big_seconds + 3600)
    records: list[dict[str, object]] = [
        {
            "job_id": BIG_JOB,
            "user": "alice",
            "account": "vision",
            "partition": "gpu",
            "state": "COMPLETED",
            "exit_code": 0,
            "start_time": big_start,
            "end_time": big_start + timedelta(seconds=big_seconds),
            "gpus": big_gpus,
            "source": "bench",
        },
        {
            "job_id": RUNNING_JOB,
            "user": "bob",
            "account": "nlp",
            "partition": "gpu",
            "state": "RUNNING",
            "start_time": now - timedelta(seconds=600),
            "gpus": 16,
            "source": "bench",
        },
    ]
    nodes = [f"gpu{i + 1:03d}" for i in range(big_gpus // 8)]
    # the big job in hour-long appends, as the collector would (rollups maintained as they go)
    for offset in range(0, big_seconds, 3600):
        chunk = _samples(
            rng,
            job_id=BIG_JOB,
            nodes=nodes,
            gpus_per_node=8,
            start=big_start + timedelta(seconds=offset),
            seconds=min(3600, big_seconds - offset),
            step=1,
        )
        store.append("gpu_samples", chunk).result()
    store.upsert_jobs(pa.Table.from_pylist(records, schema=JOB_SCHEMA)).result()
    small_jobs = generate_finished(store, scale=scale, seed=seed, now=now, nodes=nodes, rng=rng)
    running = _samples(
        rng,
        job_id=RUNNING_JOB,
        nodes=["gpu001", "gpu002"],
        gpus_per_node=8,
        start=now - timedelta(seconds=600),
        seconds=600,
        step=1,
    )
    store.append("gpu_samples", running).result()
    # every other GPU of the 128-node topology reports, idle, for the last minute: the
    # diagram draws 1,024 live GPUs
    idle = _samples(
        rng,
        job_id="",
        nodes=[f"gpu{i:03d}" for i in range(3, 129)],
        gpus_per_node=8,
        start=now - timedelta(seconds=60),
        seconds=60,
        step=1,
    )
    idle = idle.set_column(
        idle.schema.get_field_index("job_id"), "job_id", pa.nulls(idle.num_rows, pa.string())
    )
    store.append("gpu_samples", idle).result()
    rows = store.query("SELECT count(*) AS n FROM gpu_samples").to_pylist()[0]["n"]
    return {
        "big_job_gpus": big_gpus,
        "big_job_seconds": big_seconds,
        "finished_jobs": small_jobs + 1,
        "samples": int(rows),
    }


def _median(fn: Callable[[], object], rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure(service: Service, *, now: datetime, rounds: int) -> dict[str, float]:
    """Time the three reads of the budget as the web app runs them."""

    def overview() -> object:
        state = live_state(service, Viewer(ADMIN), now=now)
        live = service.live_job_gpus(ADMIN, window=service.live_window(), now=now)
        return state, live, service.collection_health(now=now)

    report_s, report = _median(lambda: service.job_report(ADMIN, BIG_JOB, now=now), rounds)
    assert report is not None
    overview_s, _ = _median(overview, rounds)
    list_s, listed = _median(lambda: service.job_reports(ADMIN, now=now), rounds)
    assert isinstance(listed, list)
    diagram_s, _ = _median(lambda: live_state(service, Viewer(ADMIN), now=now), rounds)
    return {
        "job_report_s": report_s,
        "overview_s": overview_s,
        "job_list_s": list_s,
        "diagram_s": diagram_s,
        "job_list_jobs": len(listed),
        "source": 1.0 if report.source == "summary" else 0.0,  # type: ignore[attr-defined]
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05, help="1 = the issue's full size")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", type=Path, default=None, help="default: a temporary file")
    parser.add_argument(
        "--backend",
        choices=["embedded", "prometheus"],
        default="embedded",
        help="prometheus: the 128-node twin scraped by a real Prometheus "
        "(bench/read_path_engine.py)",
    )
    parser.add_argument(
        "--raw",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the reads before any summary (default: below scale 0.5; at full size "
        "the big job's 88 M raw samples do not fit in memory at once)",
    )
    parser.add_argument("--minutes", type=float, default=6.0, help="prometheus: scrape time")
    parser.add_argument("--scrape-seconds", type=int, default=15, help="prometheus: interval")
    parser.add_argument(
        "--keep", type=Path, default=None, help="prometheus: copy its TSDB and the store here"
    )
    args = parser.parse_args(argv)
    if args.backend == "prometheus":
        from bench.read_path_engine import run

        engine = run(
            minutes=args.minutes,
            scrape_seconds=args.scrape_seconds,
            scale=args.scale,
            seed=args.seed,
            rounds=args.rounds,
            keep=args.keep,
        )
        print(json.dumps(engine))
        return engine
    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or Path(tmp) / "bench.duckdb"
        settings = Settings(
            store_path=path,
            scrape_interval_seconds=1.0,
            secret_key="bench",
            topology_path=bundled_topology("128x8-h100"),
        )
        service = Service.open(settings, users=UserDirectory.demo())
        try:
            now = datetime(2026, 11, 30, 12, 0, 0)
            started = time.perf_counter()
            sizes = generate(service.store, scale=args.scale, seed=args.seed, now=now)
            generate_s = time.perf_counter() - started
            with_raw = args.raw if args.raw is not None else args.scale < 0.5
            raw = measure(service, now=now, rounds=args.rounds) if with_raw else None
            started = time.perf_counter()
            written = 0
            while True:
                step = summarise_finished_jobs(service.store, now=now, scrape_interval_seconds=1.0)
                written += step
                if step == 0:
                    break
            summarise_s = time.perf_counter() - started
            kept = measure(service, now=now, rounds=args.rounds)
            store_bytes = service.store.size_bytes()
        finally:
            service.close()
    result: dict[str, Any] = {
        "scale": args.scale,
        **sizes,
        "generate_s": round(generate_s, 2),
        "summaries_written": written,
        "summarise_s": round(summarise_s, 2),
        "store_bytes": store_bytes,
        "job_report_s": round(kept["job_report_s"], 4),
        "overview_s": round(kept["overview_s"], 4),
        "job_list_s": round(kept["job_list_s"], 4),
        "job_list_jobs": int(kept["job_list_jobs"]),
        "diagram_s": round(kept["diagram_s"], 4),
        "report_from_summary": bool(kept["source"]),
    }
    if raw is not None:
        result |= {
            "job_report_raw_s": round(raw["job_report_s"], 4),
            "overview_raw_s": round(raw["overview_s"], 4),
            "job_list_raw_s": round(raw["job_list_s"], 4),
            "diagram_raw_s": round(raw["diagram_s"], 4),
            "job_report_speedup": round(raw["job_report_s"] / kept["job_report_s"], 1),
            "job_list_speedup": round(raw["job_list_s"] / kept["job_list_s"], 1),
        }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
