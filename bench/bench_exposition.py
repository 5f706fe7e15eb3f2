"""pytest-benchmark: exposition parsing and dcgm conversion, ours and prometheus_client's.

``make bench`` (or ``.venv/bin/pytest bench -q --benchmark-only``). The ratio against
prometheus_client, and the figures in docs/benchmarks.md, come from
``python -m bench.exposition_ratio``, which alternates the parsers in one process.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from tests.support.dcgm_pages import cluster_pages
from tests.support.exposition_oracle import oracle_samples

from bench.exposition_ratio import FIXTURE, NODES
from hpcscope.ingest.exporters.dcgm import DcgmConverter, samples_table
from hpcscope.ingest.exposition.parser import ExpositionParser, ParsedPage


@pytest.fixture(scope="module")
def pages() -> tuple[list[str], list[str]]:
    """The previous and the current scrape of a 128-node, 1,024-GPU cluster."""
    return list(cluster_pages(NODES, seed=1).values()), list(cluster_pages(NODES, seed=2).values())


def test_parse_128_pages_warm(
    benchmark: BenchmarkFixture, pages: tuple[list[str], list[str]]
) -> None:
    previous, current = pages
    parsers = [ExpositionParser() for _ in current]
    for parser, text in zip(parsers, previous, strict=True):
        parser.parse(text, source="bench")

    def run() -> int:
        return sum(len(p.parse(t, source="bench")) for p, t in zip(parsers, current, strict=True))

    assert benchmark(run) == NODES * 160


def test_parse_128_pages_cold(
    benchmark: BenchmarkFixture, pages: tuple[list[str], list[str]]
) -> None:
    _, current = pages

    def run() -> int:
        return sum(len(ExpositionParser().parse(text, source="bench")) for text in current)

    assert benchmark.pedantic(run, rounds=3, iterations=1) == NODES * 160


def test_prometheus_client_16_pages(
    benchmark: BenchmarkFixture, pages: tuple[list[str], list[str]]
) -> None:
    _, current = pages

    def run() -> int:
        return sum(len(oracle_samples(text)) for text in current[:16])

    assert benchmark.pedantic(run, rounds=3, iterations=1) == 16 * 160


def test_parse_real_fixture_warm(benchmark: BenchmarkFixture) -> None:
    text = FIXTURE.read_text()
    parser = ExpositionParser()
    parser.parse(text, source="bench")
    assert len(benchmark(parser.parse, text, source="bench")) == 38


def test_convert_128_pages_to_one_table(
    benchmark: BenchmarkFixture, pages: tuple[list[str], list[str]]
) -> None:
    previous, current = pages
    parsers = [ExpositionParser() for _ in current]
    converters = [DcgmConverter() for _ in current]
    ts = datetime.now(UTC)
    parsed: list[ParsedPage] = []
    for parser, converter, old, new in zip(parsers, converters, previous, current, strict=True):
        converter.convert(parser.parse(old, source="bench"), ts=ts, node="n")
        parsed.append(parser.parse(new, source="bench"))

    def run() -> int:
        conversions = [
            converter.convert(page, ts=ts, node="n")
            for converter, page in zip(converters, parsed, strict=True)
        ]
        return int(samples_table(conversions).num_rows)

    assert benchmark(run) == NODES * 8
