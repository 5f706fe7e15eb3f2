"""Central merge of per-rank trace summaries for captures of 32 to 256 ranks.

The real 8-rank param DLRM traces are parsed and reduced once; their summaries
(:mod:`hpcscope.analysis.traces.rank_summary`) are replicated into captures of 32, 64, 128
and 256 ranks (rank ``i`` is a copy of real rank ``i % 8``, renumbered, world size N), written
to a temporary directory, and merged by ``merge_summaries`` (read, decode, cross-rank
attribution, stragglers, evidence) and shaped as the ``--json`` document. Printed: the cost at
the source per rank (parse, reduce, encode), and per capture the merge seconds in all and per
rank (median of ``--repeat`` runs). Goal: under 1 s for 256 ranks, flat per rank. The last
line is one JSON object: ``source_ms_per_rank``, ``merge_seconds`` (wall) and
``merge_cpu_seconds`` (this process's CPU: the merge is one thread, and CPU is what the shared
machine's load disturbs least) per capture size, ``merge_256_seconds`` and
``per_rank_growth_ratio`` (CPU per rank at 256 ranks over CPU per rank at 32: 1.0 is flat).

    .venv/bin/python bench/trace_merge.py [--repeat=3]
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcscope.analysis.traces.rank_summary import encode_summary, summarize
from hpcscope.service.traces.inputs import find_traces, parse_ranks
from hpcscope.service.traces.pipeline import to_json
from hpcscope.service.traces.summaries import merge_summaries, summary_name

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
CAPTURES = (32, 64, 128, 256)


def main() -> None:
    repeat = 3
    for arg in sys.argv[1:]:
        if arg.startswith("--repeat="):
            repeat = int(arg.split("=", 1)[1])
    t0 = time.perf_counter()
    timelines = sorted(parse_ranks(find_traces([SOURCE]), workers=1), key=lambda t: t.rank)
    encoded = [encode_summary(summarize(tl)) for tl in timelines]
    source_seconds = (time.perf_counter() - t0) / len(timelines)
    print(
        f"== source side: parse + reduce + encode {source_seconds * 1000:.1f} ms per rank, "
        f"summary {statistics.mean(map(len, encoded)) / 1024:.1f} KiB per rank "
        f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)"
    )
    print("ranks | merge s (median) | ms per rank | runs | merge CPU (median)")
    merge_seconds: dict[int, float] = {}
    merge_cpu: dict[int, float] = {}
    for ranks in CAPTURES:
        with tempfile.TemporaryDirectory(prefix="hpcscope-merge-") as tmp:
            for i in range(ranks):
                tl = dataclasses.replace(timelines[i % len(timelines)], rank=i, world_size=ranks)
                Path(tmp, summary_name(tl)).write_bytes(encode_summary(summarize(tl)))
            runs, cpu = [], []
            for _ in range(repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                document = to_json(merge_summaries([tmp]))
                runs.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            assert len(document["ranks"]) == ranks
        median = statistics.median(runs)
        merge_seconds[ranks] = median
        merge_cpu[ranks] = statistics.median(cpu)
        print(
            f"{ranks:5d} | {median:16.3f} | {median / ranks * 1000:11.2f} | "
            f"{[round(r, 3) for r in runs]} | CPU {merge_cpu[ranks]:.3f} s",
            flush=True,
        )
    first, last = CAPTURES[0], CAPTURES[-1]
    print(
        json.dumps(
            {
                "source_ms_per_rank": round(source_seconds * 1000, 2),
                "merge_seconds": {str(n): round(s, 4) for n, s in merge_seconds.items()},
                "merge_cpu_seconds": {str(n): round(s, 4) for n, s in merge_cpu.items()},
                "merge_256_seconds": round(merge_seconds[last], 4),
                "per_rank_growth_ratio": round(
                    (merge_cpu[last] / last) / (merge_cpu[first] / first), 3
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
