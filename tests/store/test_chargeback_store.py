"""Chargeback reads: scoped in SQL, overlap at the period's edges, one account, GPU rows of
exactly the jobs read, and the per-account sums of ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from hpcscope.model.access import JobScope
from hpcscope.store import Store
from hpcscope.store import chargeback as queries
from tests.support.chargeback_data import write_chargeback_jobs

NOV, DEC = datetime(2026, 11, 1), datetime(2026, 12, 1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "s.duckdb")
    write_chargeback_jobs(opened)
    yield opened
    opened.close()


def _ids(store: Store, scope: JobScope, start: datetime, end: datetime, **kw: str) -> list[str]:
    table = queries.summaries_overlapping(store, scope, start=start, end=end, **kw)
    return [str(v) for v in table.column("job_id").to_pylist()]


def test_scope_is_applied_in_sql(store: Store) -> None:
    assert _ids(store, JobScope(all_jobs=True), NOV, DEC) == ["201", "202", "203", "204"]
    alice = JobScope(all_jobs=False, users=frozenset({"alice"}))
    assert _ids(store, alice, NOV, DEC) == ["201", "204"]
    lead = JobScope(all_jobs=False, users=frozenset({"carol"}), accounts=frozenset({"nlp"}))
    assert _ids(store, lead, NOV, DEC) == ["202"]
    assert _ids(store, JobScope(all_jobs=False), NOV, DEC) == []  # deny by default
    assert _ids(store, JobScope(all_jobs=True), NOV, DEC, account="speech") == ["203"]
    assert _ids(store, alice, NOV, DEC, account="speech") == []


def test_overlap_at_the_edges(store: Store) -> None:
    everyone = JobScope(all_jobs=True)
    # 204 runs 31 Oct 22:00 to 1 Nov 02:00: in both months
    assert "204" in _ids(store, everyone, datetime(2026, 10, 1), NOV)
    assert _ids(store, everyone, datetime(2026, 11, 1, 2), datetime(2026, 11, 10, 10)) == ["204"]
    assert _ids(store, everyone, datetime(2026, 11, 1, 3), datetime(2026, 11, 10, 10)) == []
    assert _ids(store, everyone, DEC, datetime(2027, 1, 1)) == []


def test_gpu_rows_are_those_of_the_jobs_read(store: Store) -> None:
    alice = JobScope(all_jobs=False, users=frozenset({"alice"}))
    rows = queries.gpu_rows_overlapping(store, alice, start=NOV, end=DEC).to_pylist()
    assert {r["job_id"] for r in rows} == {"201", "204"}
    assert len(rows) == 4 + 8
    assert set(rows[0]) == {"job_id", "node", "observed_seconds", "useful_seconds", "verdict"}


def test_seconds_by_account(store: Store) -> None:
    rows = {r["account"]: r for r in queries.seconds_by_account(store)}
    assert rows["vision"]["allocated_gpu_seconds"] == pytest.approx((4 * 2 + 8 * 4) * 3600.0)
    assert rows["speech"]["useful_gpu_seconds"] == 0.0
    assert rows["nlp"]["useful_gpu_seconds"] == pytest.approx(4 * 3600 * 0.19)
