"""Exposition parser throughput and memory: ours against prometheus_client, same process.

Run from the repository root::

    .venv/bin/python -m bench.exposition_ratio            # table on stdout
    .venv/bin/python -m bench.exposition_ratio --json     # the same figures as JSON

Pages: 128 seeded dcgm-exporter pages (8 H100 GPUs x 20 fields, ``hpc_job`` label, the label
set and value formats of the real exporter; ``tests/support/dcgm_pages.py``): the steady state
of a 1,024-GPU cluster scraped every second, which needs 128 pages/s. Also the real DataDog
fixture page. Measurements alternate between the two parsers over several rounds and report
the median, so machine load (this machine is shared) hits both alike.

- ours, warm: each target's parser has seen the target's previous page (the values differ);
  this is every scrape after the first.
- ours, cold: a fresh parser per page (the first scrape of each target).
- prometheus_client: ``text_string_to_metric_families``, every sample consumed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.support.dcgm_pages import cluster_pages

from hpcscope.ingest.exporters.dcgm import DcgmConverter
from hpcscope.ingest.exposition.parser import ExpositionParser

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests/fixtures/dcgm/metrics_dcgm-exporter_datadog-integrations-core_fixture.txt"
NODES = 128


def _oracle(pages: Sequence[str]) -> int:
    count = 0
    for text in pages:
        for family in text_string_to_metric_families(text):
            count += len(family.samples)
    return count


def _median_seconds(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(rounds: int = 5, seed: int = 2026) -> dict[str, object]:
    """All figures of the report, as a dictionary."""
    previous = list(cluster_pages(NODES, seed=seed).values())
    current = list(cluster_pages(NODES, seed=seed + 1).values())
    samples = _oracle(current[:1]) * NODES
    parsers = [ExpositionParser() for _ in current]
    for parser, text in zip(parsers, previous, strict=True):
        parser.parse(text, source="bench")  # the scrape before: fills the key cache

    def ours_warm() -> None:
        for parser, text in zip(parsers, current, strict=True):
            parser.parse(text, source="bench")

    def ours_cold() -> None:
        for text in current:
            ExpositionParser().parse(text, source="bench")

    def theirs() -> None:
        _oracle(current)

    warm, cold, oracle = [], [], []
    for _ in range(rounds):  # interleaved, so load on the machine hits all three alike
        warm.append(_median_seconds(ours_warm, 3))
        cold.append(_median_seconds(ours_cold, 1))
        oracle.append(_median_seconds(theirs, 1))
    warm_s, cold_s, oracle_s = (statistics.median(x) for x in (warm, cold, oracle))

    fixture = FIXTURE.read_text()
    fixture_samples = _oracle([fixture])
    fixture_parser = ExpositionParser()
    fixture_parser.parse(fixture, source="bench")
    fixture_ours = _median_seconds(
        lambda: [fixture_parser.parse(fixture, source="bench") for _ in range(200)], rounds
    )
    fixture_theirs = _median_seconds(lambda: [_oracle([fixture]) for _ in range(20)], rounds)

    converters = [DcgmConverter() for _ in current]
    pages = [
        parser.parse(text, source="bench") for parser, text in zip(parsers, current, strict=True)
    ]
    ts = datetime.now(UTC)
    for converter, page in zip(converters, pages, strict=True):
        converter.convert(page, ts=ts, node="n")
    convert_s = _median_seconds(
        lambda: [
            converter.convert(page, ts=ts, node="n")
            for converter, page in zip(converters, pages, strict=True)
        ],
        rounds,
    )

    memory = _memory(previous, current)
    page_bytes = statistics.mean(len(text.encode()) for text in current)
    return {
        "pages": NODES,
        "samples_per_page": samples // NODES,
        "bytes_per_page": round(page_bytes),
        "ours_warm_samples_per_second": samples / warm_s,
        "ours_cold_samples_per_second": samples / cold_s,
        "prometheus_client_samples_per_second": samples / oracle_s,
        "ratio_warm": oracle_s / warm_s,
        "ratio_cold": oracle_s / cold_s,
        "ours_warm_pages_per_second": NODES / warm_s,
        "cluster_1024_gpu_core_share_at_1s": warm_s,  # seconds of one core per second
        "first_scrape_128_pages_seconds": cold_s,
        "prometheus_client_128_pages_seconds": oracle_s,
        "fixture_samples": fixture_samples,
        "fixture_ours_samples_per_second": fixture_samples * 200 / fixture_ours,
        "fixture_prometheus_client_samples_per_second": fixture_samples * 20 / fixture_theirs,
        "fixture_ratio": (fixture_theirs / 20) / (fixture_ours / 200),
        "dcgm_convert_128_pages_seconds": convert_s,
        **memory,
        "python": sys.version.split()[0],
    }


def _memory(previous: Sequence[str], current: Sequence[str]) -> dict[str, float]:
    """Key-cache memory per target, and peak allocation while parsing one page."""
    gc.collect()
    tracemalloc.start()
    parser = ExpositionParser()
    parser.parse(previous[0], source="bench")
    cache_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    page = parser.parse(current[0], source="bench")
    _, ours_peak = tracemalloc.get_traced_memory()
    del page
    tracemalloc.reset_peak()
    base2, _ = tracemalloc.get_traced_memory()
    _oracle(current[:1])
    _, theirs_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "cache_bytes_per_target": cache_bytes,
        "cache_bytes_per_series": cache_bytes / len(parser.series),
        "ours_peak_bytes_per_page": ours_peak - base,
        "prometheus_client_peak_bytes_per_page": theirs_peak - base2,
    }


def report(figures: dict[str, object]) -> str:
    f = figures

    def num(key: str) -> float:
        value = f[key]
        assert isinstance(value, int | float)
        return float(value)

    lines = [
        f"pages: {f['pages']} dcgm-exporter pages, {f['samples_per_page']} samples each "
        f"(8 GPUs x 20 fields), ~{num('bytes_per_page') / 1024:.0f} KiB; Python {f['python']}",
        "",
        f"{'parser':<34}{'samples/s':>14}{'vs prometheus_client':>24}",
        f"{'ours, warm (steady state)':<34}{num('ours_warm_samples_per_second'):>14,.0f}"
        f"{num('ratio_warm'):>23.1f}x",
        f"{'ours, cold (first scrape)':<34}{num('ours_cold_samples_per_second'):>14,.0f}"
        f"{num('ratio_cold'):>23.1f}x",
        f"{'prometheus_client 0.26':<34}{num('prometheus_client_samples_per_second'):>14,.0f}"
        f"{1.0:>23.1f}x",
        "",
        f"real DataDog fixture ({f['fixture_samples']} samples): ours "
        f"{num('fixture_ours_samples_per_second'):,.0f}/s, prometheus_client "
        f"{num('fixture_prometheus_client_samples_per_second'):,.0f}/s, "
        f"ratio {num('fixture_ratio'):.1f}x",
        "",
        f"1,024 GPUs at 1 s (128 pages/s): ours parses {num('ours_warm_pages_per_second'):,.0f} "
        f"pages/s on one core ({num('ours_warm_pages_per_second') / 128:.1f}x the need, "
        f"{100 * num('cluster_1024_gpu_core_share_at_1s'):.1f} % of a core); "
        f"prometheus_client needs {num('prometheus_client_128_pages_seconds'):.2f} s per second",
        "first scrape of all 128 pages (cold cache): "
        f"{num('first_scrape_128_pages_seconds'):.3f} s",
        f"dcgm page -> Arrow rows, 128 pages (warm converter): "
        f"{num('dcgm_convert_128_pages_seconds') * 1000:.1f} ms",
        "",
        f"memory: key cache {num('cache_bytes_per_target') / 1024:.0f} KiB per target "
        f"({num('cache_bytes_per_series'):.0f} B per series); peak while parsing one page: ours "
        f"{num('ours_peak_bytes_per_page') / 1024:.0f} KiB, prometheus_client "
        f"{num('prometheus_client_peak_bytes_per_page') / 1024:.0f} KiB",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(rounds=args.rounds)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
