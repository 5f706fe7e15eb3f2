"""Soak benchmark of the web API (issue 17 part 4): RSS growth and errors over a long run.

    .venv/bin/python -m bench.soak                    # 600 s measured, 50 clients
    .venv/bin/python -m bench.soak --seconds 60       # a short run

The same set-up as ``bench/api_load.py`` (``hpcscope demo`` on the 128-node twin as a
subprocess, session-cookie clients, the endpoint mix of :mod:`bench.api_harness`), for
``--seconds`` after ``--warmup-seconds``; the server's RSS (``/proc/<pid>/statm``) is sampled
every ``--sample-seconds`` from the end of the warm-up, so start-up allocation and the first
caches are not counted as growth. The collector keeps scraping the twin throughout: the store
grows, as it does in production.

Growth is measured between the first and the last tenth of the window (at least 3 samples
each): ``rss_start_mb`` and ``rss_end_mb`` are the medians of those samples. The server's RSS
is not flat between two samples: the telemetry rules' evaluation, every ~15 s, holds 20-80 MiB
for about a second and hands it back (mmap'd, see ``serve/allocator.py``; 100-220 MiB for
several seconds before the rules kept their InfiniBand window between runs), so one sample at
each end measures whether a transient happened to be live then (one run: 385.7 -> 509.1 MiB,
+32 %, with the medians of the two ends 407.1 and 424.0 MiB, +4.2 %, and a floor of 380 then
413 MiB). A leak raises the
median and the floor of the last tenth; a transient of a steady size raises neither, one that
grows with the store (the rules' past 10 minutes, ``docs/benchmarks.md``) raises the median.
The point figures are printed too (``rss_first_sample_mb``, ``rss_last_sample_mb``,
``rss_point_growth_ratio``), and every sample.

The goals: RSS growth < 10 % (``rss_growth_ratio`` < 0.10) and no errors. The last line printed
is one JSON object: ``seconds``, ``requests``, ``errors``, ``rss_start_mb``, ``rss_end_mb``,
``rss_max_mb`` (MiB), ``rss_growth_ratio`` (end over start, minus 1), ``rss_floor_start_mb``
and ``rss_floor_end_mb`` (the least sample of each tenth), the point figures above,
``p99_ms``, ``rps``, ``rss_samples_mb`` (every sample), ``clients``, ``think_seconds``, ``met``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from bench.api_harness import (
    AUTH_MODES,
    TOPOLOGIES,
    Demo,
    Place,
    Tally,
    prepare_clients,
    rss_mb,
    run_client,
    summary,
)

GOAL_RSS_GROWTH_RATIO = 0.10
END_SHARE = 0.10  # the first and the last tenth of the samples are each end of the window
END_MIN_SAMPLES = 3


def rss_ends(samples: list[float]) -> tuple[list[float], list[float]]:
    """The samples of the first and of the last tenth of the window (module docstring)."""
    count = min(len(samples), max(END_MIN_SAMPLES, round(len(samples) * END_SHARE)))
    return samples[:count], samples[-count:]


async def soak(
    demo: Demo,
    *,
    clients: int,
    seconds: float,
    warmup_seconds: float,
    sample_seconds: float,
    think_seconds: float,
    timeout_seconds: float,
    auth: str = "cookie",
) -> dict[str, object]:
    """Warm up, then ``seconds`` of load with RSS sampled (module docstring)."""
    fleet = await prepare_clients(demo, clients, wait_for_jobs_seconds=90, auth=auth)
    place = Place.of(demo.topology)
    tally = [Tally()]
    window_start = time.monotonic() + warmup_seconds
    until = window_start + seconds
    tasks = [
        asyncio.create_task(
            run_client(
                demo.port,
                c,
                until=until,
                tally=tally,
                seed=i,
                think_seconds=think_seconds,
                timeout_seconds=timeout_seconds,
                place=place,
            )
        )
        for i, c in enumerate(fleet)
    ]
    await asyncio.sleep(max(0.0, window_start - time.monotonic()))
    tally[0] = Tally()
    samples = [rss_mb(demo.pid)]
    wall_start = time.monotonic()
    while time.monotonic() < until:
        await asyncio.sleep(min(sample_seconds, max(0.0, until - time.monotonic())))
        samples.append(rss_mb(demo.pid))
    await asyncio.gather(*tasks)
    wall = time.monotonic() - wall_start
    samples.append(rss_mb(demo.pid))
    figures = summary(tally[0], wall)
    first, last = rss_ends(samples)
    start_mb, end_mb = statistics.median(first), statistics.median(last)
    growth = end_mb / start_mb - 1
    return {
        "clients": clients,
        "think_seconds": think_seconds,
        "requests": figures["requests"],
        "errors": figures["errors"],
        "rps": figures["rps"],
        "p99_by_endpoint_ms": figures["p99_by_endpoint_ms"],
        "error_samples": figures["error_samples"],
        "rss_samples_mb": [round(s, 1) for s in samples],
        "rss_max_mb": round(max(samples), 1),
        "goal_rss_growth_ratio": GOAL_RSS_GROWTH_RATIO,
        "met": figures["errors"] == 0 and growth < GOAL_RSS_GROWTH_RATIO,
        "seconds": round(wall, 1),
        "rss_start_mb": round(start_mb, 1),
        "rss_end_mb": round(end_mb, 1),
        "rss_growth_ratio": round(growth, 4),
        "rss_floor_start_mb": round(min(first), 1),
        "rss_floor_end_mb": round(min(last), 1),
        "rss_first_sample_mb": round(samples[0], 1),
        "rss_last_sample_mb": round(samples[-1], 1),
        "rss_point_growth_ratio": round(samples[-1] / samples[0] - 1, 4),
        "p99_ms": figures["p99_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="measured window")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--warmup-seconds", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="RSS sample period")
    parser.add_argument("--think-seconds", type=float, default=0.0)
    parser.add_argument("--timeout-seconds", type=float, default=30.0)
    parser.add_argument("--topology", choices=sorted(TOPOLOGIES), default="128")
    parser.add_argument("--auth", choices=AUTH_MODES, default="cookie")
    parser.add_argument("--port", type=int, default=18_918)
    args = parser.parse_args(argv)
    with Demo(port=args.port, topology=TOPOLOGIES[args.topology]) as demo:
        result = asyncio.run(
            soak(
                demo,
                clients=args.clients,
                seconds=args.seconds,
                warmup_seconds=args.warmup_seconds,
                sample_seconds=args.sample_seconds,
                think_seconds=args.think_seconds,
                timeout_seconds=args.timeout_seconds,
                auth=args.auth,
            )
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
