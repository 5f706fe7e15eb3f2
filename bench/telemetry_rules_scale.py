"""CPU cost of one evaluation of the InfiniBand telemetry rules (RD-1 to RD-7) at 128 nodes.

The collector evaluates the telemetry rules after a cycle, at most every
``telemetry_rules_every_seconds`` (default 15 s), and each run judges its whole window: RD-2b's
is an hour. This builds the frame the engine reads (``ib_port_counters`` rows of 128 nodes x 8
HCA ports, one read every 2 s, in the store's port order, healthy traffic: no alert but RD-1's
idle-traffic one, there is no job) for a 10-minute and a 1-hour window, runs
:func:`~hpcscope.analysis.telemetry_rules.infiniband.infiniband_alerts` with the shipped rules
``--repeat`` times, and prints the median CPU seconds per evaluation and the share of one core
that is at the default interval. The last line is one JSON object::

    {"rows_10min": n, "cpu_seconds_10min": a, "rows_1h": m, "cpu_seconds_1h": b,
     "core_share_1h_at_15s": b / 15}

    PYTHONPATH=src:. .venv/bin/python -m bench.telemetry_rules_scale [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from hpcscope.analysis.telemetry_rules.infiniband import infiniband_alerts
from hpcscope.model.schemas import IB_COUNTER_COLUMNS
from hpcscope.service.alerts.rules import bundled_rules_dir, load_rules

NODES, PORTS, STEP_SECONDS = 128, 8, 2
T0 = datetime(2026, 12, 1)


def counters(reads: int) -> pl.DataFrame:
    """``reads`` scrapes of every port, in port order; data counters rise ~1 GB/s per port."""
    n = NODES * PORTS * reads
    slot = np.tile(np.arange(reads), NODES * PORTS)
    ts = pl.Series([T0 + timedelta(seconds=STEP_SECONDS * i) for i in range(reads)]).gather(slot)
    frame = pl.DataFrame(
        {
            "ts": ts,
            "node": np.repeat([f"gpu{i:03d}" for i in range(NODES)], PORTS * reads),
            "device": np.tile(np.repeat([f"mlx5_{p}" for p in range(PORTS)], reads), NODES),
            "port": np.ones(n, dtype=np.int16),
        }
    )
    data = slot.astype(np.float64) * STEP_SECONDS * 1e9
    return frame.with_columns(
        pl.Series(c, data if "_data_" in c else np.zeros(n)) for c in IB_COUNTER_COLUMNS
    )


def cpu_seconds(frame: pl.DataFrame, repeat: int) -> float:
    rules = load_rules(bundled_rules_dir())
    runs = []
    for _ in range(repeat):
        start = time.process_time()
        infiniband_alerts(frame, [], rules=rules, lustre={}, port_gpus={})
        runs.append(time.process_time() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, float] = {}
    for label, seconds in (("10min", 600), ("1h", 3600)):
        frame = counters(seconds // STEP_SECONDS)
        cost = cpu_seconds(frame, args.repeat)
        print(f"{label}: {frame.height:,} rows, {cost:.3f} s of CPU per evaluation")
        out[f"rows_{label}"] = frame.height
        out[f"cpu_seconds_{label}"] = round(cost, 3)
    out["core_share_1h_at_15s"] = round(out["cpu_seconds_1h"] / 15.0, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
