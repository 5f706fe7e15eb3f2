"""Ingest cost of the 1-minute rollups: CPU per append of one 1024-GPU scrape round.

    PYTHONPATH=src:. .venv/bin/python -m bench.rollup_ingest --appends 600

Appends ``--appends`` batches of 1,024 rows (128 nodes x 8 GPUs, one second apart: the
collector's batch at a 1 s scrape interval) into a fresh file store, once with every migration
(rollups maintained on each append) and once without migration 8 (no rollups). Prints one JSON
line last: CPU milliseconds per append (this process, DuckDB's threads included) for both, and
their difference.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from bench.read_path import _samples
from hpcscope.store import Store
from hpcscope.store.migrations import MIGRATIONS


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    nodes = [f"node{i:04d}" for i in range(128)]
    start = datetime(2026, 11, 1)
    batches = [
        _samples(
            rng,
            job_id="1",
            nodes=nodes,
            gpus_per_node=8,
            start=start + timedelta(seconds=i),
            seconds=1,
            step=1,
        )
        for i in range(args.appends)
    ]
    result: dict[str, float] = {}
    variants = {
        "without_rollups": tuple(m for m in MIGRATIONS if m.version < 8),
        "with_rollups": MIGRATIONS,
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, migrations in variants.items():
            with Store(Path(tmp) / f"{name}.duckdb", migrations=migrations) as store:
                cpu = time.process_time()
                for batch in batches:
                    store.append("gpu_samples", batch).result()
                result[f"{name}_cpu_ms_per_append"] = round(
                    (time.process_time() - cpu) / len(batches) * 1000, 2
                )
    result["rollups_cpu_ms_per_append"] = round(
        result["with_rollups_cpu_ms_per_append"] - result["without_rollups_cpu_ms_per_append"], 2
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
