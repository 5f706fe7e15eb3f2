"""CPU cost of one run of the InfiniBand telemetry rules (RD-1 to RD-7) at 128 nodes.

The collector runs the telemetry rules after a cycle, at most every
``telemetry_rules_every_seconds`` (default 15 s), and each run judges its whole window: RD-2b's
is an hour. This builds the rows the engine reads (``ib_port_counters`` rows of 128 nodes x 8
HCA ports, one read every 2 s, in the store's port order, healthy traffic, 16 jobs of 8 nodes
that started with the window: no alert) for a 10-minute and a 1-hour window, and measures
``--repeat`` times, median CPU seconds per run:

* ``whole``: :func:`~hpcscope.analysis.telemetry_rules.infiniband.infiniband_alerts` over all
  the rows (what every run did before the engine kept its window);
* ``kept``: what a run does now with the window full
  (:mod:`hpcscope.service.telemetry_rules.ib_window`): the view of the last 15 s of rows with
  each port's row before, merged into the hour's view, pruned to the window, and the rules
  over the view (:func:`~hpcscope.analysis.telemetry_rules.infiniband.view_alerts`).

The store's read is not in either (the whole read also read the hour from DuckDB). The last
line is one JSON object::

    {"rows_10min": n, "cpu_seconds_10min": a, "kept_cpu_seconds_10min": a2, "rows_1h": m,
     "cpu_seconds_1h": b, "kept_cpu_seconds_1h": b2, "core_share_1h_at_15s": b2 / 15,
     "whole_core_share_1h_at_15s": b / 15}

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

from hpcscope.analysis.telemetry_rules.common import JobSpan
from hpcscope.analysis.telemetry_rules.ib_view import ib_view, merged, pruned
from hpcscope.analysis.telemetry_rules.infiniband import infiniband_alerts, view_alerts
from hpcscope.analysis.telemetry_rules.port_events import rd5_columns
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


JOBS = tuple(
    JobSpan(str(4410000 + j), "u", "a", tuple(f"gpu{8 * j + i:03d}" for i in range(8)), start=T0)
    for j in range(NODES // 8)
)
RUN_SECONDS = 15


def cpu_seconds(frame: pl.DataFrame, repeat: int) -> tuple[float, float]:
    """(whole, kept) median CPU seconds of a run over ``frame`` (module docstring)."""
    rules = load_rules(bundled_rules_dir())
    rise = rd5_columns(rules.get("RD-5"))
    end = frame["ts"].max()
    assert isinstance(end, datetime)
    cut = end - timedelta(seconds=RUN_SECONDS)
    older = frame.filter(pl.col("ts") <= cut)
    tail = older.unique(subset=["node", "device", "port"], keep="last", maintain_order=True)
    new = pl.concat([tail, frame.filter(pl.col("ts") > cut)])
    held = ib_view(older, rise_columns=rise)
    whole, kept = [], []
    for _ in range(repeat):
        start = time.process_time()
        infiniband_alerts(frame, JOBS, rules=rules, lustre={}, port_gpus={})
        whole.append(time.process_time() - start)
        start = time.process_time()
        view = merged(held, ib_view(new, after=cut, rise_columns=rise), after=cut)
        view = pruned(view, since=T0 + timedelta(seconds=RUN_SECONDS))
        view_alerts(view, JOBS, rules=rules, lustre={}, port_gpus={})
        kept.append(time.process_time() - start)
    return statistics.median(whole), statistics.median(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, float] = {}
    for label, seconds in (("10min", 600), ("1h", 3600)):
        frame = counters(seconds // STEP_SECONDS)
        whole, kept = cpu_seconds(frame, args.repeat)
        print(f"{label}: {frame.height:,} rows, {whole:.3f} s of CPU per run over all of them, "
              f"{kept:.3f} s with the window kept")  # fmt: skip
        out[f"rows_{label}"] = frame.height
        out[f"cpu_seconds_{label}"] = round(whole, 3)
        out[f"kept_cpu_seconds_{label}"] = round(kept, 3)
    out["core_share_1h_at_15s"] = round(out["kept_cpu_seconds_1h"] / 15.0, 3)
    out["whole_core_share_1h_at_15s"] = round(out["cpu_seconds_1h"] / 15.0, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
