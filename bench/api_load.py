"""Load benchmark of the web API (issue 17 part 4): p99 at 50 concurrent clients.

    .venv/bin/python -m bench.api_load                         # 50 clients, 60 s measured
    .venv/bin/python -m bench.api_load --seconds 20 --clients 10

Starts ``hpcscope demo`` on the 128-node twin (``topologies/128x8-h100.yaml``) as a subprocess,
logs the clients in with the login form's session cookie, runs the endpoint mix of
:mod:`bench.api_harness` for ``--warmup-seconds`` (not counted), then for ``--seconds``, and
measures per-request latency per endpoint and overall, errors, throughput, and the server's CPU
and RSS from ``/proc``. Each client is closed-loop (its next request when the last answered),
with ``--think-seconds`` of pause between requests (0: no pause, the heaviest load).

The goal: p99 <= 100 ms, no errors. The last line printed is one JSON object: ``clients``,
``requests``, ``errors``, ``rps`` (requests per second), ``p50_ms``, ``p90_ms``, ``p99_ms``,
``max_ms``, ``p99_by_endpoint_ms`` (and p50/p90/max by endpoint), ``server_rss_mb`` (MiB, at
the end), ``server_cpu_ratio`` (server CPU seconds per wall second over the window; 1.0 = one
core), ``seconds``, ``think_seconds``, ``goal_p99_ms``, ``met``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from bench.api_harness import (
    Demo,
    Tally,
    cpu_seconds,
    prepare_clients,
    rss_mb,
    run_client,
    summary,
)

GOAL_P99_MS = 100.0


async def measure(
    demo: Demo,
    *,
    clients: int,
    seconds: float,
    warmup_seconds: float,
    think_seconds: float,
    timeout_seconds: float,
) -> dict[str, object]:
    """Warm up, then one measured window; the figures (module docstring)."""
    fleet = await prepare_clients(demo, clients, wait_for_jobs_seconds=90)
    tally = [Tally()]
    start = time.monotonic()
    window_start = start + warmup_seconds
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
            )
        )
        for i, c in enumerate(fleet)
    ]
    await asyncio.sleep(max(0.0, window_start - time.monotonic()))
    tally[0] = Tally()  # the warm-up's answers are not counted
    cpu_start, wall_start = cpu_seconds(demo.pid), time.monotonic()
    await asyncio.gather(*tasks)
    wall = time.monotonic() - wall_start
    figures = summary(tally[0], wall)
    return {
        "clients": clients,
        "seconds": round(wall, 1),
        "think_seconds": think_seconds,
        **figures,
        "server_rss_mb": round(rss_mb(demo.pid), 1),
        "server_cpu_ratio": round((cpu_seconds(demo.pid) - cpu_start) / wall, 2),
        "jobs_visible_to_admin": max(len(c.job_ids) for c in fleet),
        "goal_p99_ms": GOAL_P99_MS,
        "met": figures["errors"] == 0
        and figures["p99_ms"] is not None
        and float(str(figures["p99_ms"])) <= GOAL_P99_MS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window")
    parser.add_argument("--warmup-seconds", type=float, default=10.0)
    parser.add_argument("--think-seconds", type=float, default=0.0)
    parser.add_argument("--timeout-seconds", type=float, default=30.0)
    parser.add_argument("--port", type=int, default=18_917)
    args = parser.parse_args(argv)
    with Demo(port=args.port) as demo:
        result = asyncio.run(
            measure(
                demo,
                clients=args.clients,
                seconds=args.seconds,
                warmup_seconds=args.warmup_seconds,
                think_seconds=args.think_seconds,
                timeout_seconds=args.timeout_seconds,
            )
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
