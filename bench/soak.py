"""Soak benchmark of the web API: RSS growth and errors over a long run.

    .venv/bin/python -m bench.soak                    # 600 s measured, 50 clients
    .venv/bin/python -m bench.soak --seconds 1200     # 20 minutes: does it settle?
    .venv/bin/python -m bench.soak --seconds 60       # a short run

The same set-up as ``bench/api_load.py`` (``hpcscope demo`` on the 128-node twin as a
subprocess, ``--auth`` clients, the full mix of every polled route, :mod:`bench.api_routes`),
for ``--seconds`` after ``--warmup-seconds``; the server's RSS (``/proc/<pid>/statm``) is
sampled every ``--sample-seconds`` from the end of the warm-up, so start-up allocation and the
first caches are not counted as growth. The collector keeps scraping the twin throughout: the
store grows, as it does in production.

Growth over the first 10 minutes (or the whole window, when shorter) is measured between its
first and its last tenth (at least 3 samples each): ``rss_start_mb`` and ``rss_10min_mb`` are
the medians of those samples. A longer run also measures the rest: ``rss_end_mb`` is the median
of the last tenth of the window, ``rss_growth_after_10min_ratio`` its growth over
``rss_10min_mb``. The server's RSS is not flat between two samples: the telemetry rules'
evaluation, every ~15 s, holds 20-80 MiB for about a second and hands it back (mmap'd, see
``serve/allocator.py``), so one sample at each end measures whether a transient happened to be
live then. A leak raises the median and the floor of the last tenth; a transient of a steady
size raises neither, one that grows with the store raises the median. The point figures are
printed too (``rss_first_sample_mb``, ``rss_last_sample_mb``), and every sample.

DuckDB's share is read from the server's ``/metrics`` at every sample
(``hpcscope_store_memory_bytes``, every tag summed, as an admin): it rises as the collector
appends rows and falls at each checkpoint (``store_checkpoint_threshold_bytes``), and grows
with the blocks it keeps under its limit (``store_memory_limit_bytes``). The same ends of it,
and of the RSS less it (what the requests and the kept views hold), are reported: growth that
is the store's data tells apart from growth that is the server's.

The goals: RSS growth < 10 % over 10 minutes (``rss_growth_ratio``), none after (at most
:data:`GOAL_SETTLED_RATIO`, the samples' noise), and no errors. The last line printed is one
JSON object: ``seconds``, ``requests``, ``errors``, ``rss_start_mb``, ``rss_10min_mb``,
``rss_end_mb``, ``rss_max_mb`` (MiB), ``rss_growth_ratio`` (10 minutes over start, minus 1),
``rss_growth_after_10min_ratio`` (null for a run of 10 minutes or less), ``rss_floor_start_mb``
and ``rss_floor_end_mb`` (the least sample of the first and the last tenth), the point figures
above, ``store_memory_start_mb``, ``store_memory_10min_mb``, ``store_memory_end_mb`` and
``store_memory_samples_mb`` (DuckDB's buffers), ``rss_less_store_growth_ratio`` and
``rss_less_store_growth_after_10min_ratio``, the collector's figures over the window
(``collector_cycles``, ``collector_cycle_mean_seconds``, ``collector_cycle_max_seconds``: the
longest since the server started, ``collector_top_phases_seconds``: the three parts of its
cycles that took the most, from ``hpcscope_collector_phase_seconds``), ``p99_ms``,
``p99_by_endpoint_ms``, ``rps``,
``rss_samples_mb`` (every sample), ``clients``, ``auth``, ``topology``, ``think_seconds``,
``store_memory_limit_bytes`` (``--store-memory-limit-bytes``: the server's setting; null for its
default), ``met``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.metrics_core import Metric

from bench import memprobe
from bench.api_harness import (
    AUTH_MODES,
    ROOT,
    TOPOLOGIES,
    Client,
    Demo,
    Place,
    Tally,
    admin_login,
    exit_on_sigterm,
    metric_families,
    prepare_clients,
    rss_mb,
    run_client,
    summary,
)

GOAL_RSS_GROWTH_RATIO = 0.10
#: Growth after minute 10 that counts as none: what one transient in a tenth's median moves.
GOAL_SETTLED_RATIO = 0.02
END_SHARE = 0.10  # the first and the last tenth of the samples are each end of the window
END_MIN_SAMPLES = 3
TEN_MINUTES = 600.0


async def server_metrics(port: int, admin: Client) -> list[Metric]:
    """The server's ``/metrics``, once per sample: what :func:`store_memory_mb` and
    :func:`collector_phases` read."""
    families = await metric_families(port, admin)
    if families is None:
        raise RuntimeError("/metrics did not answer 200")
    return families


def store_memory_mb(families: list[Metric]) -> float:
    """What DuckDB holds for the server's store (``hpcscope_store_memory_bytes`` summed over
    its tags), in MiB."""
    for family in families:
        if family.name == "hpcscope_store_memory_bytes":
            return sum(sample.value for sample in family.samples) / 2**20
    raise RuntimeError("/metrics has no hpcscope_store_memory_bytes")


#: A collector part's timings from ``/metrics``: runs, seconds in all, the longest run.
PhaseTimes = dict[str, tuple[float, float, float]]
_NONE = (0.0, 0.0, 0.0)


def collector_phases(families: list[Metric]) -> PhaseTimes:
    """The collector's timings per part (``hpcscope_collector_phase_seconds`` and
    ``_max_seconds``): runs, seconds in all, the longest, by part."""
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    longest: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            phase = sample.labels.get("phase")
            if phase is None:
                continue
            if sample.name == "hpcscope_collector_phase_seconds_count":
                counts[phase] = sample.value
            elif sample.name == "hpcscope_collector_phase_seconds_sum":
                sums[phase] = sample.value
            elif sample.name == "hpcscope_collector_phase_max_seconds":
                longest[phase] = sample.value
    return {p: (counts[p], sums.get(p, 0.0), longest.get(p, 0.0)) for p in counts}


def collector_figures(start: PhaseTimes, end: PhaseTimes) -> dict[str, object]:
    """What the collector did in the window: cycles, their mean length, the longest cycle
    since the server started, and the three parts that took the most of the window."""
    spent = {
        phase: (
            runs - start.get(phase, (0.0, 0.0, 0.0))[0],
            total - start.get(phase, (0, 0.0, 0))[1],
        )
        for phase, (runs, total, _) in end.items()
    }
    cycles, cycle_seconds = spent.get("cycle", (0.0, 0.0))
    parts = sorted((p for p in spent if p != "cycle"), key=lambda p: -spent[p][1])
    return {
        "collector_cycles": int(cycles),
        "collector_cycle_mean_seconds": round(cycle_seconds / cycles, 2) if cycles else None,
        "collector_cycle_max_seconds": round(end["cycle"][2], 2) if "cycle" in end else None,
        "collector_top_phases_seconds": {p: round(spent[p][1], 1) for p in parts[:3]},
    }


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
    probe: Path | None = None,
    probe_at: tuple[float, ...] = (),
) -> dict[str, object]:
    """Warm up, then ``seconds`` of load with RSS sampled (module docstring)."""
    fleet = await prepare_clients(demo, clients, wait_for_jobs_seconds=90, auth=auth)
    admin = Client(*admin_login(demo), auth="basic")
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
    families = await server_metrics(demo.port, admin)
    stores = [store_memory_mb(families)]
    phases_start = collector_phases(families)
    times = [0.0]
    wall_start = time.monotonic()
    dumps = sorted(probe_at) if probe is not None else []
    while time.monotonic() < until:
        while probe is not None and dumps and time.monotonic() - wall_start >= dumps[0]:
            memprobe.request_dump(probe, f"{dumps.pop(0):g}")
        await asyncio.sleep(min(sample_seconds, max(0.0, until - time.monotonic())))
        samples.append(rss_mb(demo.pid))
        stores.append(store_memory_mb(await server_metrics(demo.port, admin)))
        times.append(time.monotonic() - wall_start)
    if probe is not None and dumps:
        memprobe.request_dump(probe, f"{dumps[-1]:g}")
    await asyncio.gather(*tasks)
    wall = time.monotonic() - wall_start
    samples.append(rss_mb(demo.pid))
    families = await server_metrics(demo.port, admin)
    stores.append(store_memory_mb(families))
    times.append(wall)
    collected = collector_figures(phases_start, collector_phases(families))
    figures = summary(tally[0], wall)
    start_mb, ten_mb, end_mb, first, last = _ends(samples, times)
    growth = ten_mb / start_mb - 1
    after = end_mb / ten_mb - 1 if wall > TEN_MINUTES * 1.1 else None
    # the server less DuckDB's buffers: what the requests and the kept views hold
    rest = [rss - store for rss, store in zip(samples, stores, strict=True)]
    rest_start, rest_ten, rest_end, _, _ = _ends(rest, times)
    store_start, store_ten, store_end, _, _ = _ends(stores, times)
    return {
        "clients": clients,
        "auth": auth,
        "topology": demo.topology.stem,
        "think_seconds": think_seconds,
        "requests": figures["requests"],
        "errors": figures["errors"],
        "rps": figures["rps"],
        "p99_by_endpoint_ms": figures["p99_by_endpoint_ms"],
        "error_samples": figures["error_samples"],
        "rss_samples_mb": [round(s, 1) for s in samples],
        "rss_max_mb": round(max(samples), 1),
        "goal_rss_growth_ratio": GOAL_RSS_GROWTH_RATIO,
        "goal_settled_ratio": GOAL_SETTLED_RATIO,
        "met": figures["errors"] == 0
        and growth < GOAL_RSS_GROWTH_RATIO
        and (after is None or after <= GOAL_SETTLED_RATIO),
        "seconds": round(wall, 1),
        "rss_start_mb": round(start_mb, 1),
        "rss_10min_mb": round(ten_mb, 1),
        "rss_end_mb": round(end_mb, 1),
        "rss_growth_ratio": round(growth, 4),
        "rss_growth_after_10min_ratio": None if after is None else round(after, 4),
        "rss_floor_start_mb": round(min(first), 1),
        "rss_floor_end_mb": round(min(last), 1),
        "store_memory_start_mb": round(store_start, 1),
        "store_memory_10min_mb": round(store_ten, 1),
        "store_memory_end_mb": round(store_end, 1),
        "store_memory_samples_mb": [round(s, 1) for s in stores],
        "rss_less_store_growth_ratio": round(rest_ten / rest_start - 1, 4),
        "rss_less_store_growth_after_10min_ratio": None
        if after is None
        else round(rest_end / rest_ten - 1, 4),
        "rss_first_sample_mb": round(samples[0], 1),
        "rss_last_sample_mb": round(samples[-1], 1),
        **collected,
        "p99_ms": figures["p99_ms"],
    }


def _ends(
    samples: list[float], times: list[float]
) -> tuple[float, float, float, list[float], list[float]]:
    """Medians of the first tenth, of the last tenth of the first 10 minutes and of the last
    tenth of the window; the samples of the first and the last tenth."""
    first_ten = [value for value, t in zip(samples, times, strict=True) if t <= TEN_MINUTES]
    first, at_ten = rss_ends(first_ten)
    _, last = rss_ends(samples)
    start, ten, end = (statistics.median(x) for x in (first, at_ten, last))
    return start, ten, end, first, last


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
    parser.add_argument(
        "--store-memory-limit-bytes",
        type=int,
        help="the server's store_memory_limit_bytes (default: the setting's default)",
    )
    parser.add_argument(
        "--probe", type=Path, help="a folder: probe the server's memory (bench/memprobe.py)"
    )
    parser.add_argument(
        "--probe-at", default="0,120,600", help="window seconds of the probe's dumps"
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    env = {}
    if args.probe is not None:
        args.probe.mkdir(parents=True, exist_ok=True)
        site = ROOT / "bench" / "probe_site"
        env = {
            memprobe.ENV_DIR: str(args.probe.resolve()),
            "PYTHONPATH": f"{site}:{ROOT}:{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
        }
    if args.store_memory_limit_bytes is not None:
        env["HPCSCOPE_STORE_MEMORY_LIMIT_BYTES"] = str(args.store_memory_limit_bytes)
    demo = Demo(port=args.port, topology=TOPOLOGIES[args.topology], env=env)
    try:
        demo.__enter__()
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
                probe=args.probe,
                probe_at=tuple(float(t) for t in args.probe_at.split(",") if t),
            )
        )
    finally:
        demo.__exit__(None, None, None)
    result["store_memory_limit_bytes"] = args.store_memory_limit_bytes
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
