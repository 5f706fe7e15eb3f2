#!/usr/bin/env python3
"""Measure the start-up and teardown cost of the test cluster with and without slurmdbd.

    sudo .venv/bin/python scripts/measure_slurm_startup.py [runs]

Prints one line per run and the medians: the numbers behind the slurmdbd decision in
deploy/slurm/README.md.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.slurm import slurm_cluster  # noqa: E402


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(runs):
        for accounting in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.monotonic()
                with slurm_cluster(Path(tmp), accounting=accounting) as cluster:
                    up = time.monotonic() - started
                    parts = dict(cluster.startup_seconds)
                    stop_started = time.monotonic()
                down = time.monotonic() - stop_started
            results[accounting].append((up, down))
            detail = " ".join(f"{k}={v:.2f}" for k, v in parts.items())
            print(f"accounting={accounting!s:5} up={up:5.2f}s down={down:5.2f}s  ({detail})")
    for accounting, values in results.items():
        ups = [u for u, _ in values]
        downs = [d for _, d in values]
        print(
            f"median accounting={accounting!s:5} up={statistics.median(ups):.2f}s "
            f"down={statistics.median(downs):.2f}s over {len(values)} runs"
        )


if __name__ == "__main__":
    main()
