"""The public MoE training rank (DeepSeek's H800, expert parallel EP64 through DeepEP's
kernels, overlapped with compute by DualPipe) through ``hpcscope traces analyze``, against the
truth computed here from the trace's own kernel intervals.

The trace is ``train.json`` of https://github.com/deepseek-ai/profile-data (3.1 MB, 2025-02;
the repository states no licence, so hpcscope does not ship a copy): download it and pass its
path. The truth is computed independently of hpcscope's code: every GPU event of the trace
(``cat`` kernel, gpu_memcpy, gpu_memset), the expert all-to-all being DeepEP's kernels
(``dpsk::ep::`` in DeepSeek's build, ``deep_ep::`` in the public one); its time is the union
of their intervals, its hidden part the union's intersection with the union of every other
GPU event (a stream runs one kernel at a time, so the overlap is with other streams). The
last line is one JSON object::

    {"ep_seconds": a, "truth_ep_seconds": b, "ep_error_ratio": |a-b|/b,
     "hidden_ratio": h, "truth_hidden_ratio": t, "hidden_error_points": 100*|h-t|,
     "ep_share_of_gpu_busy": s, "unclassified_seconds": u, "communication_phase_seconds": c}

    curl -LO https://github.com/deepseek-ai/profile-data/raw/main/train.json
    PYTHONPATH=src:. .venv/bin/python -m bench.public_moe_trace train.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.support.plain_intervals import length, overlap, union

from hpcscope.service.traces.pipeline import analyze, to_json

_EP = re.compile(r"dpsk::ep::|deep_ep::")
_GPU = {"kernel", "gpu_memcpy", "gpu_memset"}


def truth(path: Path) -> dict[str, float]:
    """The expert all-to-all's time and hidden share from the trace's intervals (seconds)."""
    events = json.loads(path.read_bytes())["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in _GPU]
    ep = union([(e["ts"], e["ts"] + e["dur"]) for e in gpu if _EP.search(e["name"])])
    rest = union([(e["ts"], e["ts"] + e["dur"]) for e in gpu if not _EP.search(e["name"])])
    ep_us = length(ep)
    busy_us = length(union([*ep, *rest]))
    return {
        "seconds": ep_us / 1e6,
        "hidden_ratio": overlap(ep, rest) / ep_us if ep_us else 0.0,
        "share_of_gpu_busy": ep_us / busy_us if busy_us else 0.0,
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    path = Path(argv[0])
    doc = to_json(analyze([path]))
    comm = doc["comm_classes"]
    assert comm is not None  # the bundled classes are applied
    (ep,) = [c for c in comm["classes"] if c["class"] == "ep_all_to_all"]
    rank = str(doc["ranks"][0])
    hidden = ep["hidden_ratio"]
    assert hidden is not None  # the class has time on this rank
    want = truth(path)
    seconds = ep["seconds_per_step"][rank] * doc["steps"]
    source = doc["sources"][0]
    print(f"trace: {path} ({source['device']}, world size {source['world_size']})")
    print(
        f"expert all-to-all: {seconds * 1e3:.2f} ms (truth {want['seconds'] * 1e3:.2f} ms), "
        f"hidden {ep['hidden_ratio']:.1%} (truth {want['hidden_ratio']:.1%})"
    )
    for row in comm["unclassified"]:
        print(f"unclassified: {row['seconds'] * 1e3:.3f} ms {row['name'][:100]}")
    for note in doc["notes"]:
        print(f"note: {note}")
    print(
        json.dumps(
            {
                "ep_seconds": round(seconds, 6),
                "truth_ep_seconds": round(want["seconds"], 6),
                "ep_error_ratio": round(abs(seconds - want["seconds"]) / want["seconds"], 4),
                "hidden_ratio": ep["hidden_ratio"],
                "truth_hidden_ratio": round(want["hidden_ratio"], 6),
                "hidden_error_points": round(100 * abs(hidden - want["hidden_ratio"]), 2),
                "ep_share_of_gpu_busy": round(want["share_of_gpu_busy"], 4),
                "unclassified_seconds": comm["unclassified_seconds"],
                "communication_phase_seconds": doc["phases"][rank]["communication"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
