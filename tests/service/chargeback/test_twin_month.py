"""Acceptance (issue 14 part 3): on a month of twin jobs, chargeback totals reconcile with the
sum of the jobs' allocated GPU-hours to the second (from the Slurm records), and useful
GPU-hours with the sum of the kept job summaries; months add up to the whole; the causes of
the waste add up to allocated - useful."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from hpcscope.analysis.chargeback.aggregate import GroupBy
from hpcscope.analysis.chargeback.periods import overlap_share, parse_period
from hpcscope.model.access import Principal, Role
from hpcscope.model.topology import load_topology
from hpcscope.service.chargeback import reads
from hpcscope.service.chargeback.contracts import ChargebackReport
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.store import Store
from tests.support.twin_month import write_twin_month

ADMIN = Principal(name="admin", role=Role.ADMIN)
SETTINGS = Settings(chargeback_gpu_hour_rates={"NVIDIA H100 80GB HBM3": 2.5})
TOPOLOGY = load_topology(bundled_topology())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root: Path = tmp_path_factory.mktemp("twin-month")
    opened = Store(root / "store.duckdb")
    month = write_twin_month(opened, root / "twin")
    assert month.summaries == len(month.jobs) > 500
    yield opened
    opened.close()


def _report(store: Store, period: str, by: GroupBy = GroupBy.ACCOUNT) -> ChargebackReport:
    return reads.report(store, ADMIN, TOPOLOGY, SETTINGS, period=parse_period(period), by=by)


def _slurm_allocated_seconds(store: Store, period: str) -> dict[str, float]:
    """Per account: Σ GPUs x seconds of each job inside the period, from the Slurm records."""
    span = parse_period(period)
    found: dict[str, float] = {}
    for job in store.query("SELECT * FROM jobs").to_pylist():
        start: datetime = job["start_time"]
        end: datetime = job["end_time"]
        inside = (min(end, span.end) - max(start, span.start)).total_seconds()
        if inside > 0:
            found[job["account"]] = found.get(job["account"], 0.0) + job["gpus"] * inside
    return found


def test_allocated_reconciles_with_slurm_to_the_second(store: Store) -> None:
    report = _report(store, "2026-11")
    expected = _slurm_allocated_seconds(store, "2026-11")
    assert {r.key for r in report.rows} == set(expected)
    for row in report.rows:
        assert abs(row.allocated_gpu_hours * 3600 - expected[row.key]) < 1.0, row.key
    total_seconds = report.total.allocated_gpu_hours * 3600
    assert abs(total_seconds - sum(expected.values())) < 1.0
    assert total_seconds > 16 * 86_400 * 10  # a busy month of the 16-GPU cluster


def test_jobs_span_both_month_boundaries(store: Store) -> None:
    for edge in (datetime(2026, 11, 1), datetime(2026, 12, 1)):
        spanning = store.query(
            "SELECT count(*) AS n FROM jobs WHERE start_time < ? AND end_time > ?", [edge, edge]
        ).to_pylist()[0]["n"]
        assert spanning > 0, edge


def test_useful_reconciles_with_the_kept_summaries(store: Store) -> None:
    span = parse_period("2026-11")
    summaries = store.query("SELECT * FROM job_summaries").to_pylist()
    expected = sum(
        s["useful_gpu_seconds"] * overlap_share(s["start_time"], s["end_time"], span)
        for s in summaries
    )
    # the generator keeps samples inside their jobs: no summary needs the useful <= allocated cap
    assert all(s["useful_gpu_seconds"] <= s["allocated_gpu_seconds"] for s in summaries)
    report = _report(store, "2026-11")
    assert abs(report.total.useful_gpu_hours * 3600 - expected) < 1.0
    # over a period holding every job whole: exactly the sum of the summaries
    whole = _report(store, "2026-10-01..2026-12-31")
    assert (
        abs(whole.total.useful_gpu_hours * 3600 - sum(s["useful_gpu_seconds"] for s in summaries))
        < 1.0
    )
    assert whole.total.jobs == len(summaries)
    assert (
        abs(
            whole.total.allocated_gpu_hours * 3600
            - sum(s["allocated_gpu_seconds"] for s in summaries)
        )
        < 1.0
    )


def test_months_add_up_to_the_whole_and_causes_to_the_loss(store: Store) -> None:
    whole = _report(store, "2026-10-01..2026-12-31", GroupBy.USER)
    months = [_report(store, m, GroupBy.USER) for m in ("2026-10", "2026-11", "2026-12")]
    for field in ("allocated_gpu_hours", "useful_gpu_hours", "lost_gpu_hours", "cost"):
        parts = sum(getattr(m.total, field) for m in months)
        assert abs(parts - getattr(whole.total, field)) < 1e-6 * max(1.0, parts), field
    for row in [*whole.rows, whole.total]:
        assert abs(sum(row.waste_gpu_hours.values()) - row.lost_gpu_hours) < 1 / 3600
        assert abs(row.allocated_gpu_hours - row.useful_gpu_hours - row.lost_gpu_hours) < 1 / 3600
    # the twin runs every profile: each measured cause shows up
    for cause in (
        "failed_job",
        "idle_allocation",
        "barrier_wait",
        "data_starved",
        "low_efficiency",
    ):
        assert whole.total.waste_gpu_hours[cause] > 0, cause
    # cost at the configured H100 rate
    assert abs(whole.total.cost - whole.total.allocated_gpu_hours * 2.5) < 1e-6 * whole.total.cost


def test_trend_months_match_the_monthly_reports(store: Store) -> None:
    trend = reads.trend(
        store, ADMIN, TOPOLOGY, SETTINGS, period=parse_period("2026-12"), months=3,
        by=GroupBy.ACCOUNT,
    )  # fmt: skip
    assert trend.months == ["2026-10", "2026-11", "2026-12"]
    for i, month in enumerate(trend.months):
        report = _report(store, month)
        assert abs(trend.total.lost_gpu_hours[i] - report.total.lost_gpu_hours) < 1e-9
        for series in trend.series:
            row = next((r for r in report.rows if r.key == series.key), None)
            assert abs(series.lost_cost[i] - (row.lost_cost if row else 0.0)) < 1e-9
