"""Burn-rate alerts into the alert engine, the collector hook's cadence, the /metrics counters.

A bad hour is played into a real store as Slurm job records: six hours of 2 successful jobs a
minute, then an hour of 5 jobs a minute of which 4 fail (a 16x burn against 95 %).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Severity, Vector
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.service.settings import Settings
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.engine import (
    SloUpkeep,
    burn_rate_alerts,
    evaluate_into_alerts,
    slo_counters,
)
from hpcscope.service.slo.report import report_for_scope
from hpcscope.store import Store
from hpcscope.store.alerts import alerts as stored_alerts

END = datetime(2026, 10, 2, 12, 0)
CONFIG = SloConfig.from_settings(Settings())


def _record(job_id: str, end: datetime, failed: bool) -> dict[str, object]:
    start = end - timedelta(minutes=20)
    return {
        "job_id": job_id, "user": "alice", "account": "vision", "partition": "gpu",
        "qos": "normal", "state": "FAILED" if failed else "COMPLETED",
        "exit_code": 1 if failed else 0, "submit_time": start - timedelta(minutes=2),
        "start_time": start, "end_time": end, "gpus": 1, "source": "sacct",
    }  # fmt: skip


def bad_hour(*, bad: bool = True, end: datetime = END, prefix: str = "") -> pa.Table:
    """Job records of the six good hours and the bad hour, the last ending at ``end``."""
    rows = []
    for minute in range(7 * 60):
        at = end - timedelta(minutes=7 * 60 - minute - 1)
        in_bad_hour = bad and minute >= 6 * 60
        for i in range(5 if in_bad_hour else 2):
            rows.append(_record(f"{prefix}{minute}.{i}", at, failed=in_bad_hour and i < 4))
    return pa.Table.from_pylist(rows, schema=JOB_SCHEMA)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "s.duckdb")
    opened.upsert_jobs(bad_hour()).result()
    yield opened
    opened.close()


def test_a_bad_hour_raises_one_page_alert_that_grows(store: Store) -> None:
    assert burn_rate_alerts(store, CONFIG, now=END - timedelta(minutes=30)) == []
    assert evaluate_into_alerts(store, CONFIG, now=END) == 1
    (alert,) = stored_alerts(store, JobScope(all_jobs=True))
    assert (alert.rule_id, alert.vector, alert.severity) == (
        "SLO-PAGE", Vector.SERVICE_LEVEL, Severity.CRITICAL,
    )  # fmt: skip
    assert alert.subject == "job_success" and alert.job_id is None
    assert "16.0x over 1h" in alert.title
    assert "above 14.4x" in alert.evidence[0].summary and alert.evidence[0].link == "/slo"
    evaluate_into_alerts(store, CONFIG, now=END + timedelta(minutes=1))
    (again,) = stored_alerts(store, JobScope(all_jobs=True))
    assert again.key == alert.key and again.count == 2
    # researchers never see it (no job: admins only), not even the owner of the failed jobs
    assert stored_alerts(store, JobScope(all_jobs=False, users=frozenset({"alice"}))) == []


def test_good_hours_raise_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.duckdb")
    store.upsert_jobs(bad_hour(bad=False)).result()
    assert evaluate_into_alerts(store, CONFIG, now=END) == 0
    store.close()


def test_the_hook_runs_on_the_first_cycle_and_then_every_n(store: Store) -> None:
    clock = iter([END, END + timedelta(minutes=1)])
    upkeep = SloUpkeep(store, CONFIG, now=lambda: next(clock))
    results = [upkeep.after_cycle() for _ in range(CONFIG.evaluate_every_cycles + 1)]
    assert results[0] == 1 and results[-1] == 1
    assert all(r is None for r in results[1:-1])
    assert stored_alerts(store, JobScope(all_jobs=True))[0].count == 2


def test_the_hook_never_raises(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    store.close()
    assert SloUpkeep(store, CONFIG, now=lambda: END).after_cycle() is None


def test_counters_are_the_cumulative_events(store: Store) -> None:
    counters = {c.slo: c for c in slo_counters(store, CONFIG, now=END)}
    success = counters["job_success"]
    assert (success.good, success.bad) == (6 * 60 * 2 + 60, 240)
    assert counters["queue_wait"].bad == 0
    report = report_for_scope(store, CONFIG, JobScope(all_jobs=True), scope="cluster", now=END)
    by_slo = {s.slo: s for s in report.slos}
    assert by_slo["job_success"].total == success.good + success.bad
    assert success.budget_remaining_ratio == by_slo["job_success"].budget_remaining_ratio
    assert counters["gpu_efficiency"].good == 0  # no summary yet: no GPU-seconds
