"""Peak memory and speed of ``hpcscope traces analyze`` on a ~1 GB trace (streamed parsing).

Builds the trace from a real one (HolisticTraceAnalysis' ``df_index_resolver``, 53.7 MB,
216k events, 5 profiler steps): its events are replicated N times, each copy shifted in time
by the span of the original and given new step numbers (``ProfilerStep#N``) and correlation
ids, so the result is one valid Kineto trace of 5 N consecutive steps. It is written to a
temporary directory (never committed) and analysed by the real CLI in a child process run
under ``/usr/bin/time -v``, whose "Maximum resident set size" is the peak RSS reported.

    .venv/bin/python bench/big_trace.py --gigabytes 1
    .venv/bin/python bench/big_trace.py --gigabytes 1 --gzip   # the same, gzip-compressed
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
from io import BufferedIOBase
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests/fixtures/traces/hta_df_index_resolver_1rank/df_index_resolver.json.gz"
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _shift(event: dict[str, Any], copy: int, span: float, ids: int, steps: int) -> bytes:
    out = dict(event)
    if "ts" in out:
        out["ts"] = out["ts"] + copy * span
    name = out.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        match = STEP.match(name)
        if match:
            out["name"] = f"ProfilerStep#{int(match.group(1)) + copy * steps}"
    args = out.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] = args[key] + copy * ids
        out["args"] = args
    return orjson.dumps(out)


def build(target: Path, gigabytes: float, *, compress: bool) -> tuple[int, int]:
    """Write the replicated trace; returns (JSON bytes, events)."""
    document = orjson.loads(gzip.decompress(SOURCE.read_bytes()))
    events = document.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    ids = 1 + max(
        (
            v
            for e in events
            for k, v in (e.get("args") or {}).items()
            if k in ("correlation", "External id") and isinstance(v, int)
        ),
        default=0,
    )
    steps = sum(1 for e in events if STEP.match(str(e.get("name", ""))))
    one_copy = sum(len(orjson.dumps(e)) + 2 for e in events)
    copies = max(1, round(gigabytes * 1e9 / one_copy))
    written = count = 0
    opened: BufferedIOBase = (
        gzip.open(target, "wb", compresslevel=1) if compress else target.open("wb")  # noqa: SIM115
    )
    with opened as handle:
        head = orjson.dumps(document)[:-1] + b', "traceEvents": [\n'
        handle.write(head)
        written += len(head)
        first = True
        for copy in range(copies):
            chunk = []
            for event in events:
                chunk.append((b"" if first else b",\n") + _shift(event, copy, span, ids, steps))
                first = False
            data = b"".join(chunk)
            handle.write(data)
            written += len(data)
            count += len(events)
        handle.write(b"\n]}\n")
        written += 4
    return written, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--gzip", action="store_true", help="write the trace gzip-compressed")
    parser.add_argument("--keep", type=Path, help="write the trace here instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcscope-big-trace-") as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / ("rank-1.json.gz" if args.gzip else "rank-1.json")
        t0 = time.perf_counter()
        size, events = build(target, args.gigabytes, compress=args.gzip)
        print(
            f"built {target.name}: {size / 1e9:.3f} GB of JSON, {events:,} events, "
            f"{target.stat().st_size / 1e9:.3f} GB on disk, in {time.perf_counter() - t0:.1f} s"
        )
        command = [
            "/usr/bin/time",
            "-v",
            sys.executable,
            "-m",
            "hpcscope",
            "traces",
            "analyze",
            str(target),
            "--json",
        ]
        env = {**os.environ, "HPCSCOPE_LOG_LEVEL": "WARNING"}
        t0 = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"analysis failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        if peak is None:
            sys.exit(f"no peak RSS in the output of /usr/bin/time -v:\n{proc.stderr[-4000:]}")
        peak_kib = int(peak[1])
        doc = orjson.loads(proc.stdout)
        print(
            f"hpcscope traces analyze: {wall:.2f} s wall ({size / wall / 1e6:.0f} MB/s of JSON), "
            f"peak RSS {peak_kib / 1024:.0f} MiB ({peak_kib * 1024 / size:.2f} x the JSON), "
            f"{doc['steps']} steps, partial={doc['partial']}"
        )
        print("command:", " ".join(command))


if __name__ == "__main__":
    main()
