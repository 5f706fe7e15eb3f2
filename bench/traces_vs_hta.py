"""hpcscope vs HolisticTraceAnalysis 0.5.0 on the same traces, in one run of this script.

Each tool runs in a fresh child process (``--run hpcscope|hta PATH``); the parent samples the
resident memory of the child's whole process tree (hpcscope's parallel parsers included) every
5 ms and reports peak RSS, wall time, JSON throughput and the per-rank idle / compute /
non-compute totals side by side. Needs ``.bench-venv`` (``make bench-venv``): HTA is never a
runtime or test dependency.

    .bench-venv/bin/python bench/traces_vs_hta.py tests/fixtures/traces/hta_df_index_resolver_1rank
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path


def _tree_rss_bytes(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as fh:
                stack.extend(int(c) for c in fh.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def measure(tool: str, path: str) -> dict[str, object]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--run", tool, path], stdout=subprocess.PIPE, text=True
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_bytes(proc.pid))
            time.sleep(0.005)

    thread = threading.Thread(target=sample)
    thread.start()
    out, _ = proc.communicate()
    done.set()
    thread.join()
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_bytes"] = peak
    return result


def json_bytes(path: str) -> int:
    total = 0
    for file in sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)]:
        name = file.name
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(file) as tar:
                total += sum(m.size for m in tar.getmembers() if m.name.endswith(".json"))
        elif name.endswith(".json.gz"):
            with gzip.open(file) as fh:
                while chunk := fh.read(1 << 24):
                    total += len(chunk)
        elif name.endswith(".json"):
            total += file.stat().st_size
    return total


def run_hpcscope(path: str) -> dict[str, object]:
    from hpcscope.service.traces import analyze

    t0 = time.perf_counter()
    result = analyze([path])
    wall = time.perf_counter() - t0
    gpu = {t.rank: t.gpu for t in result.timelines}
    return {
        "wall_seconds": wall,
        "totals": {
            str(r): [g.idle_seconds * 1e6, g.compute_seconds * 1e6, g.non_compute_seconds * 1e6]
            for r, g in gpu.items()
            if g is not None
        },
    }


def run_hta(path: str) -> dict[str, object]:
    import logging
    import shutil
    import tempfile

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    src = Path(path)
    workdir = None
    if src.is_file() and src.name.endswith((".tar.gz", ".tgz", ".tar")):
        workdir = tempfile.mkdtemp()
        with tarfile.open(src) as tar:
            tar.extractall(workdir, filter="data")
        src = next(p.parent for p in Path(workdir).rglob("*.json"))
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(src))
    df = analysis.get_temporal_breakdown(visualize=False)
    wall = time.perf_counter() - t0
    if workdir:
        shutil.rmtree(workdir)
    return {
        "wall_seconds": wall,
        "totals": {
            str(int(row["rank"])): [
                float(row["idle_time(us)"]),
                float(row["compute_time(us)"]),
                float(row["non_compute_time(us)"]),
            ]
            for _, row in df.iterrows()
        },
    }


def main() -> None:
    if sys.argv[1] == "--run":
        tool, path = sys.argv[2], sys.argv[3]
        print(json.dumps((run_hpcscope if tool == "hpcscope" else run_hta)(path)))
        return
    for path in sys.argv[1:]:
        size = json_bytes(path)
        ours, theirs = measure("hpcscope", path), measure("hta", path)
        print(f"== {path}: {size / 1e6:.1f} MB of JSON")
        for name, r in (("hpcscope", ours), ("HTA 0.5.0", theirs)):
            wall = float(r["wall_seconds"])  # type: ignore[arg-type]
            print(
                f"  {name:9s} {wall:7.3f} s  {size / wall / 1e6:7.1f} MB/s  "
                f"peak RSS {int(r['peak_rss_bytes']) / 2**20:7.1f} MiB"
            )  # type: ignore[arg-type]
        print(
            f"  throughput ratio hpcscope/HTA: "
            f"{float(theirs['wall_seconds']) / float(ours['wall_seconds']):.1f}x; "  # type: ignore[arg-type]
            f"peak RSS ratio hpcscope/HTA: "
            f"{int(ours['peak_rss_bytes']) / int(theirs['peak_rss_bytes']):.2f}"
        )  # type: ignore[arg-type]
        worst = 0.0
        for rank, hta in sorted(theirs["totals"].items(), key=lambda kv: int(kv[0])):  # type: ignore[union-attr]
            mine = ours["totals"][rank]  # type: ignore[index]
            diffs = [abs(a - b) / b * 100 if b else 0.0 for a, b in zip(mine, hta, strict=True)]
            worst = max(worst, *diffs)
            print(
                f"  rank {rank}: idle/compute/non-compute us hpcscope "
                f"{[round(x) for x in mine]} HTA {[round(x) for x in hta]} diff % "
                f"{[round(d, 3) for d in diffs]}"
            )
        print(f"  largest totals difference: {worst:.3f} %")


if __name__ == "__main__":
    os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "0")
    main()
