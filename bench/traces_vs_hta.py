"""hpcscope vs HolisticTraceAnalysis 0.5.0 on the same traces, in one run of this script.

Each tool runs in a fresh child process (``--run hpcscope|hta PATH``), ``--repeat`` times
(the median wall time is reported: the machine is shared); the parent samples the resident
memory of the child's whole process tree (hpcscope's parallel parsers included) every 5 ms and
reports the peak, the wall time of the analysis itself (imports excluded, for both), JSON
throughput and the per-rank idle / compute / non-compute totals side by side. An archive is
extracted once, before timing, and both tools read the same extracted files (HTA cannot read
archives). Needs ``.bench-venv`` (``make bench-venv``): HTA is never a runtime or test
dependency.

    .bench-venv/bin/python bench/traces_vs_hta.py tests/fixtures/traces/hta_df_index_resolver_1rank

``--whole-process`` measures what a user waits for instead: each run is a fresh process,
imports included (``python -m hpcscope traces analyze DIR --json`` against a Python process that
imports HTA and runs ``get_temporal_breakdown``), the two alternating, on two sets: *big8*, the
real 54 MB ``df_index_resolver`` rank replicated to 8 ranks (generated in a temporary directory),
and *small8*, the real 8-rank param DLRM set (extracted once). It also times
``python -m hpcscope --help``. The last line printed is one JSON object: ``big8_speedup``,
``big8_rss_ratio``, ``small8_speedup``, ``small8_rss_ratio`` (hpcscope / HTA peak RSS of the
process tree) and ``help_seconds`` (medians)::

    .bench-venv/bin/python bench/traces_vs_hta.py --whole-process --repeat=3
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import NotRequired, TypedDict


class Run(TypedDict):
    """One tool's run on one input: what the child prints, completed by the parent."""

    wall_seconds: float
    cpu_seconds: float
    totals: dict[str, list[float]]  # rank -> idle, compute, non-compute time in microseconds
    peak_rss_bytes: NotRequired[int]  # of the child's process tree, sampled by the parent
    walls: NotRequired[list[float]]  # every run's wall seconds, added by _median


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


def measure(tool: str, path: str) -> Run:
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
    result: Run = json.loads(out.strip().splitlines()[-1])
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


def _cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (HTA's parser pool, ours)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_hpcscope(path: str) -> Run:
    # numpy imports numpy.ma lazily, on the first np.median/np.unique call (15 ms); HTA's
    # imports (pandas) load it before its timing starts, so it is imported here too: both
    # tools are timed without their imports, as the module docstring says.
    import numpy.ma  # noqa: F401

    from hpcscope.service.traces.pipeline import analyze

    t0, c0 = time.perf_counter(), _cpu_seconds()
    result = analyze([path])
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    gpu = {t.rank: t.gpu for t in result.timelines}
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "totals": {
            str(r): [g.idle_seconds * 1e6, g.compute_seconds * 1e6, g.non_compute_seconds * 1e6]
            for r, g in gpu.items()
            if g is not None
        },
    }


def run_hta(path: str) -> Run:
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    t0, c0 = time.perf_counter(), _cpu_seconds()
    analysis = TraceAnalysis(trace_dir=path)
    df = analysis.get_temporal_breakdown(visualize=False)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "totals": {
            str(int(row["rank"])): [
                float(row["idle_time(us)"]),
                float(row["compute_time(us)"]),
                float(row["non_compute_time(us)"]),
            ]
            for _, row in df.iterrows()
        },
    }


def _prepared(path: str, workdir: Path) -> str:
    """A directory both tools can read: archives extracted once, before any timing."""
    src = Path(path)
    if src.is_file() and src.name.endswith((".tar.gz", ".tgz", ".tar")):
        target = workdir / src.name.split(".")[0]
        with tarfile.open(src) as tar:
            tar.extractall(target, filter="data")
        return str(next(p.parent for p in target.rglob("*.json")))
    return path


def _median(runs: list[Run]) -> Run:
    runs = sorted(runs, key=lambda r: r["wall_seconds"])
    middle = runs[len(runs) // 2].copy()
    middle["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    middle["walls"] = [round(r["wall_seconds"], 3) for r in runs]
    cpus = sorted(r["cpu_seconds"] for r in runs)
    middle["cpu_seconds"] = cpus[len(cpus) // 2]
    return middle


def _interleaved(path: str, repeat: int) -> tuple[Run, Run]:
    """Alternate the tools (ours, HTA, ours, HTA...) so a burst of load on the shared machine
    hits both alike; the median of each tool's runs is reported."""
    ours: list[Run] = []
    theirs: list[Run] = []
    for _ in range(repeat):
        ours.append(measure("hpcscope", path))
        theirs.append(measure("hta", path))
    return _median(ours), _median(theirs)


def main() -> None:
    if sys.argv[1:2] == ["--whole-process"] or "--whole-process" in sys.argv[1:]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from bench.traces_whole_process import whole_process_main

        whole_process_main([a for a in sys.argv[1:] if a != "--whole-process"])
        return
    if sys.argv[1] == "--run":
        tool, path = sys.argv[2], sys.argv[3]
        print(json.dumps((run_hpcscope if tool == "hpcscope" else run_hta)(path)))
        return
    args = sys.argv[1:]
    repeat = 3
    if args and args[0].startswith("--repeat="):
        repeat, args = int(args[0].split("=", 1)[1]), args[1:]
    summary = []
    with tempfile.TemporaryDirectory(prefix="hpcscope-bench-") as tmp:
        for original in args:
            path = _prepared(original, Path(tmp))
            size = json_bytes(path)
            ours, theirs = _interleaved(path, repeat)
            print(
                f"== {original}: {size / 1e6:.1f} MB of JSON, median of {repeat} interleaved "
                f"runs (load average {os.getloadavg()[0]:.1f})"
            )
            for name, r in (("hpcscope", ours), ("HTA 0.5.0", theirs)):
                wall = r["wall_seconds"]
                print(
                    f"  {name:9s} {wall:7.3f} s  {size / wall / 1e6:7.1f} MB/s  "
                    f"CPU {r['cpu_seconds']:6.3f} s  "
                    f"peak RSS {r['peak_rss_bytes'] / 2**20:7.1f} MiB  runs {r['walls']}"
                )
            speed = theirs["wall_seconds"] / ours["wall_seconds"]
            cpu_ratio = theirs["cpu_seconds"] / ours["cpu_seconds"]
            rss = ours["peak_rss_bytes"] / theirs["peak_rss_bytes"]
            print(
                f"  throughput ratio hpcscope/HTA: {speed:.1f}x (CPU time {cpu_ratio:.1f}x); "
                f"peak RSS ratio hpcscope/HTA: {rss:.2f}"
            )
            worst = 0.0
            for rank, hta in sorted(theirs["totals"].items(), key=lambda kv: int(kv[0])):
                mine = ours["totals"][rank]
                diffs = [abs(a - b) / b * 100 if b else 0.0 for a, b in zip(mine, hta, strict=True)]
                worst = max(worst, *diffs)
                print(
                    f"  rank {rank}: idle/compute/non-compute us hpcscope "
                    f"{[round(x) for x in mine]} HTA {[round(x) for x in hta]} diff % "
                    f"{[round(d, 3) for d in diffs]}"
                )
            print(f"  largest totals difference: {worst:.3f} %")
            summary.append((original, size, worst, speed, cpu_ratio, rss))
    print(
        "== summary: input | MB of JSON | largest totals diff % | throughput x (wall) | "
        "CPU-time x | peak RSS ratio"
    )
    for original, size, worst, speed, cpu_ratio, rss in summary:
        print(
            f"  {original} | {size / 1e6:.1f} | {worst:.3f} | {speed:.1f} | {cpu_ratio:.1f} | "
            f"{rss:.2f}"
        )


if __name__ == "__main__":
    os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "0")
    main()
