"""Speed and memory of the straggler simulator, as a script (``make bench`` runs it via pytest).

    .venv/bin/python -m bench.simulate_scale              # both targets, human-readable
    .venv/bin/python -m bench.simulate_scale --gpus 16384 --steps 1000 --json   # one run

Targets (issue 4): 1,024 GPUs x 10,000 steps in under 1 s; 16,384 GPUs x 1,000 steps without
exceeding 1 GB of RAM. Memory is the peak resident set size of this process (``VmHWM``, see
:func:`peak_rss_bytes`), measured in a fresh process per run so that one run's peak does not
hide another's; ``baseline_rss_bytes`` is the same process after importing numpy
and hpcscope, before simulating. The model is the CLI's default: 5 % lognormal jitter, 20 ms
hiccups at p = 1e-3 per GPU and step, a straggler, GC pauses every 50 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def peak_rss_bytes() -> int:
    """Peak resident set size of this process image.

    ``VmHWM`` of ``/proc/self/status`` (Linux): unlike ``getrusage().ru_maxrss``, it starts
    afresh at ``exec``, so a run started from a large parent (pytest) is not charged the
    parent's size. Elsewhere, ``ru_maxrss``.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_once(gpus: int, steps: int, seed: int) -> dict[str, float]:
    from hpcscope.analysis.simulate.step_model import StepModel, Straggler
    from hpcscope.analysis.simulate.stepsim import simulate_scaling

    model = StepModel(
        jitter_cv=0.05,
        hiccup_probability=1e-3,
        hiccup_seconds=0.020,
        gc_interval_steps=50,
        gc_pause_seconds=0.010,
        stragglers=(Straggler(2, "backward", 1.5),),
    )
    baseline = peak_rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    [point] = simulate_scaling(model, [gpus], {gpus: 0.006}, steps=steps, seed=seed)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "gpus": gpus,
        "steps": steps,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "load_average_1m": os.getloadavg()[0],
        "gpu_steps_per_second": gpus * steps / elapsed,
        "peak_rss_bytes": peak_rss_bytes(),
        "baseline_rss_bytes": baseline,
        "efficiency": point.efficiency,
    }


def in_subprocess(gpus: int, steps: int, seed: int = 0) -> dict[str, float]:
    """Run one simulation in a fresh interpreter and return its figures."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--gpus", str(gpus), "--steps",
         str(steps), "--seed", str(seed), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.gpus is not None and args.steps is not None:
        result = run_once(args.gpus, args.steps, args.seed)
        print(json.dumps(result) if args.json else result)
        return
    speed = in_subprocess(1024, 10_000)
    memory = in_subprocess(16_384, 1_000)
    print(
        f"1,024 GPUs x 10,000 steps: {speed['seconds']:.3f} s wall, {speed['cpu_seconds']:.3f} s "
        f"CPU ({speed['gpu_steps_per_second'] / 1e6:.1f} M GPU-steps/s; target < 1 s; load "
        f"average {speed['load_average_1m']:.1f} on {os.cpu_count()} CPUs)"
    )
    print(
        f"16,384 GPUs x 1,000 steps: {memory['seconds']:.3f} s, peak RSS "
        f"{memory['peak_rss_bytes'] / 2**20:.0f} MiB (interpreter + numpy + hpcscope before "
        f"simulating: {memory['baseline_rss_bytes'] / 2**20:.0f} MiB; target < 1 GB)"
    )


if __name__ == "__main__":
    main()
