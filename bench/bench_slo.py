"""pytest-benchmark: the SLO figures over 20,000 Slurm job records (a month of sacct lines).

What a ``/metrics`` scrape (the cumulative counters), a collector's SLO evaluation (burn-rate
alerts) and a ``/slo`` request (the admin's report) cost on that store. ``make bench`` (or
``.venv/bin/pytest bench/bench_slo.py -q --benchmark-only``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from tests.service.slo.sacct_history import NOW, load_history, sacct_history

from hpcscope.model.access import JobScope
from hpcscope.service.settings import Settings
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.engine import burn_rate_alerts, slo_counters
from hpcscope.service.slo.report import report_for_scope
from hpcscope.store import Store

CONFIG = SloConfig.from_settings(Settings())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("slo") / "s.duckdb"
    opened = Store(path)
    load_history(opened, sacct_history(jobs=20_000, days=30), now=NOW)
    yield opened
    opened.close()


def test_metrics_counters(benchmark: BenchmarkFixture, store: Store) -> None:
    counters = benchmark(slo_counters, store, CONFIG, now=NOW)
    assert sum(c.good + c.bad for c in counters if c.event_unit == "jobs") > 20_000


def test_burn_rate_evaluation(benchmark: BenchmarkFixture, store: Store) -> None:
    benchmark(burn_rate_alerts, store, CONFIG, now=NOW)


def test_admin_report(benchmark: BenchmarkFixture, store: Store) -> None:
    report = benchmark(
        report_for_scope, store, CONFIG, JobScope(all_jobs=True), scope="cluster", now=NOW
    )
    assert report.slos[0].total > 0
