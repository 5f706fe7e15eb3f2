"""Whole-process timing of ``hpcscope traces analyze`` against HolisticTraceAnalysis 0.5.0.

The ``--whole-process`` mode of ``bench/traces_vs_hta.py`` (see its docstring): what a user
waits for, imports and process start-up included. Every run is a fresh process; the two tools
alternate (ours, HTA, ours, HTA...) so a burst of load on the shared machine hits both alike;
medians are reported.

Time and memory are measured in separate runs. A timed run is not observed: the wall time from
start to exit and the CPU time from ``wait4``. A memory run samples the whole process tree
every 2 ms (a pool's workers count): the ratios use the tree's proportional set size (PSS: a
page that forked workers share with their parent counts once, as the kernel charges it), never
less than the main process's own peak RSS (its ``VmHWM``, which a peak between two samples
cannot escape; ``wait4``'s ``ru_maxrss`` is not used: after ``fork`` + ``exec`` it still counts
the forking parent's memory); the sum of the processes' RSS is printed too. The sampler reads
``smaps_rollup``, which walks the page tables under the process's memory-map lock, and it needs
a core: on two cores it slowed hpcscope's big8 run, which keeps both cores busy, from 0.94 to
1.26 s (medians of 5, alternating), while HTA, mostly on one core, had a core to spare. So the
memory runs' wall times are printed but never used for a speed-up.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
BIG_SOURCE = FIXTURES / "hta_df_index_resolver_1rank" / "df_index_resolver.json.gz"
SMALL_SOURCE = FIXTURES / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
_DISTRIBUTED = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*\}')

_HTA_CHILD = """
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(json.dumps({str(int(r["rank"])): [float(r["idle_time(us)"]), float(r["compute_time(us)"]),
    float(r["non_compute_time(us)"])] for _, r in df.iterrows()}))
"""


def _peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` of one process: its peak resident memory so far."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _tree_memory_bytes(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of a process and its descendants, summed."""
    pss, rss, stack = 0, 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as fh:
                stack.extend(int(c) for c in fh.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pss, rss


class Run(NamedTuple):
    """One fresh process: wall seconds, peak memory (tree PSS, at least the main process's
    peak RSS), stdout, peak of the tree's summed RSS, CPU seconds (user + system, workers
    included: robust to the load of a shared machine, unlike the wall time)."""

    wall: float
    memory: int
    text: str
    summed_rss: int
    cpu: float


def run_process(argv: list[str], *, sample: bool = True) -> Run:
    """Run ``argv`` as a fresh process and measure it (see :class:`Run`); with ``sample``
    False, nothing watches it while it runs (its memory fields are 0)."""
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="0")
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        peak, peak_rss, own_peak = 0, 0, 0
        done = threading.Event()

        def sample_tree() -> None:
            nonlocal peak, peak_rss, own_peak
            while not done.is_set():
                pss, rss = _tree_memory_bytes(proc.pid)
                own_peak = max(own_peak, _peak_rss_bytes(proc.pid))
                peak, peak_rss = max(peak, pss), max(peak_rss, rss)
                time.sleep(0.002)

        thread = threading.Thread(target=sample_tree, daemon=True)
        if sample:
            thread.start()
        # reap only after the last sample: a zombie's /proc entry still answers, a reaped one not
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        wall = time.perf_counter() - t0
        done.set()
        if sample:
            thread.join()
        _, status, usage = os.wait4(proc.pid, 0)  # CPU time of it and its reaped children
        cpu = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} exited {proc.returncode}")
        out.seek(0)
        text = out.read().decode()
    return Run(wall, max(peak, own_peak), text, max(peak_rss, own_peak), cpu)


def hpcscope_argv(path: Path) -> list[str]:
    return [sys.executable, "-m", "hpcscope", "traces", "analyze", str(path), "--json"]


def hta_argv(path: Path) -> list[str]:
    return [sys.executable, "-c", _HTA_CHILD, str(path)]


def make_big8(directory: Path, ranks: int = 8) -> Path:
    """The real 54 MB rank written ``ranks`` times, as ranks 0..N-1 of an N-rank job."""
    data = gzip.decompress(BIG_SOURCE.read_bytes())
    target = directory / "big8"
    target.mkdir()
    for rank in range(ranks):
        info = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}' % (
            rank,
            ranks,
        )
        (target / f"rank-{rank}.json").write_bytes(_DISTRIBUTED.sub(info, data, count=1))
    return target


def make_small8(directory: Path) -> Path:
    """The real 8-rank param DLRM set, extracted (HTA cannot read archives)."""
    target = directory / "small8"
    with tarfile.open(SMALL_SOURCE) as tar:
        tar.extractall(target, filter="data")
    return next(p.parent for p in target.rglob("*.json"))


def _totals_of(document: dict[str, Any]) -> dict[str, list[float]]:
    return {
        rank: [g["idle_seconds"] * 1e6, g["compute_seconds"] * 1e6, g["non_compute_seconds"] * 1e6]
        for rank, g in document["gpu_time"].items()
    }


def compare(path: Path, repeat: int, label: str) -> dict[str, float]:
    """Alternate the two tools ``repeat`` times on ``path``, timed runs then memory runs;
    print and return the medians (time) and maxima (memory)."""
    ours: list[Run] = []
    theirs: list[Run] = []
    our_mem: list[Run] = []
    hta_mem: list[Run] = []
    worst = 0.0
    for _ in range(repeat):
        ours.append(run_process(hpcscope_argv(path), sample=False))
        mine = _totals_of(json.loads(ours[-1].text))
        theirs.append(run_process(hta_argv(path), sample=False))
        hta: dict[str, list[float]] = json.loads(theirs[-1].text.strip().splitlines()[-1])
        for rank, values in hta.items():
            for a, b in zip(mine[rank], values, strict=True):
                worst = max(worst, abs(a - b) / b * 100 if b else 0.0)
    for _ in range(repeat):
        our_mem.append(run_process(hpcscope_argv(path)))
        hta_mem.append(run_process(hta_argv(path)))
    our_wall = statistics.median(r.wall for r in ours)
    hta_wall = statistics.median(r.wall for r in theirs)
    our_cpu = statistics.median(r.cpu for r in ours)
    hta_cpu = statistics.median(r.cpu for r in theirs)
    our_rss = max(r.memory for r in our_mem)
    hta_rss = max(r.memory for r in hta_mem)
    our_sum = max(r.summed_rss for r in our_mem)
    hta_sum = max(r.summed_rss for r in hta_mem)
    print(
        f"== {label}: whole process, median of {repeat} alternating runs "
        f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)\n"
        f"  hpcscope  {our_wall:7.3f} s  peak PSS {our_rss / 2**20:7.1f} MiB "
        f"(summed RSS {our_sum / 2**20:7.1f} MiB)  CPU {our_cpu:7.3f} s  "
        f"runs {[round(r.wall, 3) for r in ours]}\n"
        f"  HTA 0.5.0 {hta_wall:7.3f} s  peak PSS {hta_rss / 2**20:7.1f} MiB "
        f"(summed RSS {hta_sum / 2**20:7.1f} MiB)  CPU {hta_cpu:7.3f} s  "
        f"runs {[round(r.wall, 3) for r in theirs]}\n"
        f"  speed-up {hta_wall / our_wall:.1f}x (CPU time {hta_cpu / our_cpu:.1f}x), "
        f"memory ratio {our_rss / hta_rss:.3f} "
        f"(summed RSS {our_sum / hta_sum:.3f}), "
        f"largest idle/compute/non-compute difference {worst:.3f} %\n"
        f"  memory runs' wall (sampled every 2 ms, not used): hpcscope "
        f"{[round(r.wall, 3) for r in our_mem]}, HTA {[round(r.wall, 3) for r in hta_mem]}",
        flush=True,
    )
    return {"speedup": hta_wall / our_wall, "rss_ratio": our_rss / hta_rss}


def help_seconds(repeat: int) -> float:
    """Median wall seconds of ``python -m hpcscope --help``."""
    runs = [
        run_process([sys.executable, "-m", "hpcscope", "--help"], sample=False)
        for _ in range(repeat)
    ]
    walls = [run.wall for run in runs]
    print(
        f"== hpcscope --help: median {statistics.median(walls):.3f} s, runs "
        f"{[round(w, 3) for w in walls]}",
        flush=True,
    )
    return statistics.median(walls)


def compile_package() -> None:
    """Write hpcscope's bytecode before timing, as installing a package does (pip compiled
    HTA's): a run with ``PYTHONDONTWRITEBYTECODE`` set, or a fresh checkout, would otherwise
    compile ~40 modules from source in every timed process (~40 ms of CPU)."""
    import compileall

    import hpcscope

    compileall.compile_dir(str(Path(hpcscope.__file__).parent), quiet=1)


def whole_process_main(args: list[str]) -> None:
    """``--whole-process [--repeat=N]``: both sets, then the JSON line."""
    repeat = 3
    for arg in args:
        if arg.startswith("--repeat="):
            repeat = int(arg.split("=", 1)[1])
    compile_package()
    with tempfile.TemporaryDirectory(prefix="hpcscope-whole-") as tmp:
        big = compare(make_big8(Path(tmp)), repeat, "big8: 8 x 54 MB df_index_resolver")
        small = compare(make_small8(Path(tmp)), repeat, "small8: param DLRM 8 ranks, 7 MB")
    result = {
        "big8_speedup": round(big["speedup"], 2),
        "big8_rss_ratio": round(big["rss_ratio"], 3),
        "small8_speedup": round(small["speedup"], 2),
        "small8_rss_ratio": round(small["rss_ratio"], 3),
        "help_seconds": round(help_seconds(max(5, repeat)), 3),
    }
    print(json.dumps(result))
