"""Start-up of ``hpcscope`` as a user runs it: fresh processes under ``/usr/bin/time -v``.

Each command runs ``--runs`` times as a fresh ``python -m hpcscope`` process, its output to
``/dev/null``; ``/usr/bin/time -v`` reports the wall clock, the CPU (user + system) and the
peak RSS (``Maximum resident set size``). The anchor, an empty ``python -c pass``, runs
interleaved with them, so a burst of load on the shared machine hits both alike. With
``--baseline-src DIR`` (another checkout's ``src``) every command also runs from there,
alternating with this tree's. Medians are printed; the last line is one JSON object:
``{"<command>": {"wall_seconds", "cpu_seconds", "rss_mib"}, ..., "anchor": {...}}``
(and ``"baseline"`` with the same keys).

    .venv/bin/python bench/cli_start.py [--runs 9] [--baseline-src ../main/src]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "traces"

#: The commands measured: name -> arguments after ``python -m hpcscope``.
COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "version": ["version", "--json"],
    "traces analyze 2-rank 3.4 MB": [
        "traces",
        "analyze",
        str(TRACES / "hta_trace_filter_2rank"),
        "--json",
    ],
    "traces analyze 54 MB (3 MB gz)": [
        "traces",
        "analyze",
        str(TRACES / "hta_df_index_resolver_1rank"),
        "--json",
    ],
}

_WALL = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)")
_FIELD = re.compile(
    r"^\s*(User time \(seconds\)|System time \(seconds\)|Maximum resident set "
    r"size \(kbytes\)): ([\d.]+)$",
    re.M,
)


def measure(argv: list[str], src: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one fresh process."""
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(
        ["/usr/bin/time", "-v", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    wall = _WALL.search(done.stderr)
    fields = dict(_FIELD.findall(done.stderr))
    if wall is None or len(fields) != 3:
        raise SystemExit(f"no /usr/bin/time report for {argv}:\n{done.stderr[-2000:]}")
    hours, minutes, seconds = wall.groups()
    wall_s = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    cpu_s = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return wall_s, cpu_s, float(fields["Maximum resident set size (kbytes)"]) / 1024


def _medians(samples: list[tuple[float, float, float]]) -> dict[str, float]:
    wall, cpu, rss = zip(*samples, strict=True)
    return {
        "wall_seconds": round(statistics.median(wall), 3),
        "cpu_seconds": round(statistics.median(cpu), 3),
        "rss_mib": round(statistics.median(rss), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    trees = {"this": ROOT / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    # bytecode written first, as installing a package does: with PYTHONDONTWRITEBYTECODE set
    # (or a fresh checkout) every timed process would compile the modules it imports
    # (bench/traces_whole_process.py does the same)
    for src in trees.values():
        compileall.compile_dir(str(src / "hpcscope"), quiet=1)
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    anchor: list[tuple[float, float, float]] = []
    for _ in range(args.runs):
        for name, cli_args in COMMANDS.items():
            for tree, src in trees.items():
                argv = [sys.executable, "-m", "hpcscope", *cli_args]
                samples.setdefault((tree, name), []).append(measure(argv, src))
            anchor.append(measure([sys.executable, "-c", "pass"], ROOT / "src"))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, {args.runs} runs")
    print("tree | command | wall s | CPU s | peak RSS MiB (medians)")
    result: dict[str, object] = {}
    for (tree, name), runs in samples.items():
        row = _medians(runs)
        print(f"{tree} | {name} | {row['wall_seconds']} | {row['cpu_seconds']} | {row['rss_mib']}")
        if tree == "this":
            result[name] = row
        else:
            baseline = result.setdefault("baseline", {})
            assert isinstance(baseline, dict)
            baseline[name] = row
    result["anchor"] = _medians(anchor)
    print(f"anchor | python -c pass | {result['anchor']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
