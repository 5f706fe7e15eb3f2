"""Run the real gloo scenarios of tests/service/traces/test_comm_report_real_runs.py and print,
one JSON line per scenario, the class found, its time and hidden share against the profiler's
intervals, the bubble, the What-if gain and the ranks named (the figures of docs/traces.md).

Usage: ``PYTHONPATH=src:. python scripts/comm_classes_real_runs.py OUT_DIR`` (reuses OUT_DIR's
traces when present).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.service.traces.test_comm_report_real_runs import CLASS, SCENARIOS, _truth
from tests.support.comm_ranks import generate

from hpcscope.service.traces.pipeline import analyze, to_json


def main() -> None:
    out = Path(sys.argv[1])
    if not (out / "pipeline").exists():
        generate(SCENARIOS, out, world_size=4)
    for sc in SCENARIOS:
        doc = to_json(analyze([out / sc.name], world_size=sc.ranks))["comm_classes"]
        assert doc is not None
        (c,) = [x for x in doc["classes"] if x["class"] == CLASS[sc.kind]]
        n = len(doc["per_step"])
        worst_t = worst_h = tot_t = tot_h = 0.0
        for r, path in enumerate(sorted((out / sc.name).glob("rank-*.json"))):
            t = _truth(path)
            est = c["seconds_per_step"][str(r)] * n
            hid = c["hidden_seconds_per_step"][str(r)] * n
            worst_t = max(worst_t, abs(est / t["seconds"] - 1))
            worst_h = max(worst_h, abs(hid / est - t["hidden"] / t["seconds"]))
            tot_t += t["seconds"]
            tot_h += t["hidden"]
        ranks = c["seconds_per_step"]
        print(
            json.dumps(
                {
                    "scenario": sc.name,
                    "class": c["class"],
                    "classes": [x["class"] for x in doc["classes"]],
                    "ms_per_step_mean": round(sum(ranks.values()) / len(ranks) * 1000, 2),
                    "hidden_ratio": c["hidden_ratio"],
                    "true_hidden_ratio": round(tot_h / tot_t, 4),
                    "worst_time_error": round(worst_t, 4),
                    "worst_hidden_points": round(worst_h * 100, 2),
                    "bubble_ms": {
                        k: round(v * 1000, 2) for k, v in doc["bubble_seconds_per_step"].items()
                    },
                    "what_if_gain_ms": round(c["what_if_gain_seconds"] * 1000, 2),
                    "stragglers": [s["message"] for s in doc["stragglers"]],
                    "unclassified": len(doc["unclassified"]),
                }
            )
        )


if __name__ == "__main__":
    main()
