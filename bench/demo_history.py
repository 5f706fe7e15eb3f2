"""How long the demo's 30 days of history take to write (target: <= 20 s on 2 cores).

    .venv/bin/python -m bench.demo_history --rounds 3

Each round opens a fresh store and runs what ``hpcscope demo`` runs before it collects: the
twin's month (``twin/history.py``: the scheduler, every node's dcgm-exporter page every 10
minutes, slurmrestd's job lists, the incidents' Falco and Tetragon lines) read by the
collector's code (``service/history.py``: parsers, merges, attribution, the alert engine, the
kept summaries). The last line printed is one JSON object: the seconds of each round, their
median, and what was written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from hpcscope.model.timeutil import epoch_seconds, utcnow
from hpcscope.service.core import Service
from hpcscope.service.history import HistoryReport, write_history
from hpcscope.service.settings import Settings
from hpcscope.twin.history import simulate_history


def one_round(root: Path) -> HistoryReport:
    """A month into a fresh store under ``root``."""
    service = Service.open(Settings(store_path=root / "hpcscope.duckdb"))
    try:
        end = utcnow()
        chunks = simulate_history(
            service.topology, root / "twin", end=epoch_seconds(end), step_seconds=600
        )
        return write_history(service, chunks, root / "read", end=end, step_seconds=600)
    finally:
        service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reports = []
    for index in range(args.rounds):
        with tempfile.TemporaryDirectory() as scratch:
            report = one_round(Path(scratch))
        reports.append(report)
        print(f"round {index + 1}: {report.seconds:.1f} s", flush=True)
    last = reports[-1]
    print(
        json.dumps(
            {
                "seconds": [round(r.seconds, 2) for r in reports],
                "median_seconds": round(statistics.median(r.seconds for r in reports), 2),
                "jobs": last.jobs,
                "gpu_samples": last.samples,
                "summaries": last.summaries,
                "alerts": last.alerts,
            }
        )
    )


if __name__ == "__main__":
    main()
