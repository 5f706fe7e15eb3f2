"""The SLO figures equal the ones computed independently from the raw Slurm records.

A seeded month of real-format ``sacct --parsable2`` lines goes through hpcscope's parser into a
real store (plus kept summaries for most ended jobs, a few naming an Xid); the report is then
checked against figures this test computes itself from the text lines, with plain Python: the
field split, the times, the state-to-cause table of ``docs/slo.md``, linear-interpolation
percentiles. For the admin (cluster) and for alice (her jobs only).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from hpcscope.ingest.slurm.parsable import parse_sacct_parsable2
from hpcscope.model.access import JobScope
from hpcscope.service.settings import Settings
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.contracts import SloReport
from hpcscope.service.slo.report import report_for_scope
from hpcscope.store import Store
from tests.service.slo.sacct_history import (
    FINISHED,
    NOW,
    expected_cause,
    load_history,
    sacct_history,
)
from tests.support.paths import FIXTURES

WINDOW_DAYS = 7.0
THRESHOLD = 3600.0


@dataclass(frozen=True, slots=True)
class Expected:
    sums: dict[str, tuple[float, float]]
    causes: dict[str, int]
    waits: dict[tuple[str | None, str | None], tuple[int, float, float]]


Loaded = tuple[Store, str, frozenset[str], dict[str, tuple[float, float]]]


def _time(text: str) -> datetime | None:
    return None if text == "Unknown" else datetime.fromisoformat(text)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _expected(text: str, xid_jobs: frozenset[str], summaries: dict[str, tuple[float, float]],
              *, user: str | None, now: datetime = NOW,
              window_days: float = WINDOW_DAYS) -> Expected:  # fmt: skip
    NOW = now  # noqa: N806
    start_window = NOW - timedelta(days=window_days)

    def inside(moment: datetime | None) -> bool:
        return moment is not None and start_window < moment <= NOW

    queue_good = queue_total = 0
    success_good = success_total = 0
    useful = allocated = 0.0
    by_cause: Counter[str] = Counter()
    waits: dict[tuple[str | None, str | None], list[float]] = {}
    for line in text.splitlines():
        f = line.split("|")
        job_id, who = f[0], f[8]
        partition, qos = f[3] or None, f[4] or None  # sacct prints nothing when unknown
        if user is not None and who != user:
            continue
        submit, start, end = _time(f[10]), _time(f[12]), _time(f[13])
        state = f[16].split(" ")[0]
        assert submit is not None
        waited_until = start or end or NOW
        waited = (waited_until - submit).total_seconds()
        if start is not None and waited <= THRESHOLD:
            if inside(start):
                queue_good += 1
                queue_total += 1
        elif waited > THRESHOLD and inside(submit + timedelta(seconds=THRESHOLD)):
            queue_total += 1
        if start is not None and inside(start):
            waits.setdefault((partition, qos), []).append((start - submit).total_seconds())
        if state in FINISHED and inside(end):
            cause = expected_cause(state, f[15], xid=job_id in xid_jobs and job_id in summaries)
            by_cause[cause] += 1
            if cause != "cancelled":
                success_total += 1
                success_good += cause == "success"
            if job_id in summaries:
                u, a = summaries[job_id]
                useful += min(u, a)
                allocated += a
    return Expected(
        sums={
            "queue_wait": (queue_good, queue_total),
            "job_success": (success_good, success_total),
            "gpu_efficiency": (useful, allocated),
        },
        causes=dict(by_cause),
        waits={k: (len(v), _quantile(v, 0.5), _quantile(v, 0.95)) for k, v in waits.items()},
    )


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[Loaded]:
    history = sacct_history()
    store = Store(tmp_path / "s.duckdb")
    summaries = load_history(store, history, now=NOW)
    yield store, history.text, history.xid_jobs, summaries
    store.close()


def _config() -> SloConfig:
    return SloConfig.from_settings(
        Settings(slo_window_days=WINDOW_DAYS, slo_queue_wait_seconds=THRESHOLD)
    )


def _check(report: SloReport, expected: Expected, *, non_trivial: bool = True) -> None:
    slos = {s.slo: s for s in report.slos}
    for name in ("queue_wait", "job_success", "gpu_efficiency"):
        good, total = expected.sums[name]
        assert slos[name].good == pytest.approx(good), name
        assert slos[name].total == pytest.approx(total), name
        if non_trivial:
            assert total > 0 and 0 < good < total, name  # non-trivial on both sides
        if total == 0:
            continue
        budget = 1 - slos[name].objective_ratio
        assert slos[name].budget_remaining_ratio == pytest.approx(
            1 - (total - good) / (budget * total)
        )
    assert report.ended_jobs_by_cause == expected.causes
    got = {(w.partition, w.qos): (w.jobs, w.p50_wait_seconds, w.p95_wait_seconds)
           for w in report.queue_waits}  # fmt: skip
    assert got.keys() == expected.waits.keys()
    for key, (jobs, p50, p95) in expected.waits.items():
        assert got[key][0] == jobs
        assert got[key][1] == pytest.approx(p50) and got[key][2] == pytest.approx(p95)


def test_cluster_figures_match_the_raw_records(loaded: Loaded) -> None:
    store, text, xid_jobs, summaries = loaded
    report = report_for_scope(store, _config(), JobScope(all_jobs=True), scope="cluster", now=NOW)
    expected = _expected(text, xid_jobs, summaries, user=None)
    _check(report, expected)
    # every cause of the issue is present in the month
    causes = {"user_error", "node_failure_xid", "node_failure", "preemption", "timeout"}
    assert causes <= set(expected.causes)


def test_a_researchers_figures_are_her_jobs_only(loaded: Loaded) -> None:
    store, text, xid_jobs, summaries = loaded
    scope = JobScope(all_jobs=False, users=frozenset({"alice"}))
    report = report_for_scope(store, _config(), scope, scope="own jobs", now=NOW)
    _check(report, _expected(text, xid_jobs, summaries, user="alice"))
    assert {a.account for a in report.accounts} == {"vision"}


def test_the_committed_xdmod_records_too(tmp_path: Path) -> None:
    """The real sacct bytes of ``tests/fixtures/slurm/sacct_parsable2_xdmod`` (2015-2016):
    a TIMEOUT after 37 h in the queue, a CANCELLED, and two COMPLETED (one with an empty
    partition) that waited 3.6 days and 63 minutes."""
    text = (FIXTURES / "slurm" / "sacct_parsable2_xdmod" / "accounting-logs.log").read_text()
    store = Store(tmp_path / "x.duckdb")
    store.upsert_jobs(parse_sacct_parsable2(text, source="xdmod").snapshot.jobs).result()
    now, days = datetime(2016, 8, 2), 800.0
    config = SloConfig.from_settings(
        Settings(slo_window_days=days, slo_queue_wait_seconds=THRESHOLD)
    )
    report = report_for_scope(store, config, JobScope(all_jobs=True), scope="cluster", now=now)
    expected = _expected(text, frozenset(), {}, user=None, now=now, window_days=days)
    _check(report, expected, non_trivial=False)
    assert expected.sums["queue_wait"] == (0.0, 4.0)
    assert expected.sums["job_success"] == (2.0, 3.0)
    assert report.ended_jobs_by_cause == {"cancelled": 1, "success": 2, "timeout": 1}
    store.close()
