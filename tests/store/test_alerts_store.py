"""The alerts table: dedup upserts keep state, ack/resolve record who and when, reads are
scoped through the jobs table, and a store written before migration 6 upgrades in place."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from hpcscope.model.access import JobScope, Principal, Role
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.store import Store
from hpcscope.store.alerts import (
    alerts,
    job_ids_with_alerts,
    known_job_ids_with_alerts,
    set_alert_state,
    upsert_alerts,
)
from hpcscope.store.migrations import MIGRATIONS

T = datetime(2026, 11, 29, 12, 0, 0)
ADMIN = JobScope(all_jobs=True)


def _alert(job: str | None = "42", *, rule: str = "GI-1", subject: str = "rank 1", at=T) -> Alert:  # type: ignore[no-untyped-def]
    return Alert(
        rule, Vector.GRADIENT_INJECTION, Severity.HIGH, "outlier", at, at, node="n1",
        job_id=job, gpu=1, subject=subject, step=7,
        evidence=(Evidence("step 7", "/spool/42/rank-1.jsonl", "line 8"),),
    )  # fmt: skip


def _jobs(store: Store) -> None:
    rows = [
        {"job_id": "42", "user": "bob", "account": "nlp", "source": "test"},
        {"job_id": "43", "user": "alice", "account": "vision", "source": "test"},
    ]
    store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()


def test_repeats_grow_count_and_last_seen_and_keep_the_state(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        first = _alert()
        upsert_alerts(store, [first]).result()
        assert set_alert_state(store, first.key, AlertState.ACKNOWLEDGED, by="bob", at=T).result()
        five = T + timedelta(minutes=5)
        later = replace(first, first_seen=five, last_seen=five, step=9, severity=Severity.MEDIUM)
        upsert_alerts(store, [later, later]).result()
        [stored] = alerts(store, ADMIN)
        assert stored.count == 3
        assert (stored.first_seen, stored.last_seen) == (T, T + timedelta(minutes=5))
        assert stored.step == 9
        assert stored.severity is Severity.HIGH  # the higher severity is kept
        assert (stored.state, stored.state_by, stored.state_at) == (
            AlertState.ACKNOWLEDGED, "bob", T,
        )  # fmt: skip
        assert stored.evidence == first.evidence


def test_distinct_subjects_are_distinct_alerts_and_unknown_keys_change_nothing(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        upsert_alerts(store, [_alert(subject="rank 1"), _alert(subject="rank 2")]).result()
        assert len(alerts(store, ADMIN)) == 2
        assert not set_alert_state(store, "nope", AlertState.RESOLVED, by="x", at=T).result()


@pytest.mark.parametrize(
    ("principal", "visible"),
    [
        (Principal("bob", Role.RESEARCHER), {"42"}),
        (Principal("alice", Role.RESEARCHER), {"43"}),
        (Principal("carol", Role.TEAM_LEAD, frozenset({"nlp", "vision"})), {"42", "43"}),
        (Principal("eve", Role.RESEARCHER), set()),
        (Principal("root", Role.ADMIN), {"42", "43", None, "999"}),
    ],
)
def test_reads_are_scoped_through_jobs(
    tmp_path: Path, principal: Principal, visible: set[str | None]
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _jobs(store)
        upsert_alerts(store, [_alert("42"), _alert("43"), _alert(None), _alert("999")]).result()
        seen = {a.job_id for a in alerts(store, principal.job_scope())}
        assert seen == visible  # no job, or a job Slurm never described: admins only


def test_filters_by_job_state_and_severity(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        low = replace(_alert(rule="GI-2"), severity=Severity.MEDIUM)
        upsert_alerts(store, [_alert(), low, _alert("43")]).result()
        assert {a.rule_id for a in alerts(store, ADMIN, min_severity=Severity.HIGH)} == {"GI-1"}
        assert len(alerts(store, ADMIN, job_id="42")) == 2
        set_alert_state(store, low.key, AlertState.RESOLVED, by="root", at=T).result()
        open_ = alerts(store, ADMIN, states=[AlertState.OPEN])
        assert low.key not in {a.key for a in open_} and len(open_) == 2


def test_a_store_from_before_the_alerts_migration_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
    )
    for migration in MIGRATIONS[:5]:  # what the commit before alerts wrote
        con.execute(migration.sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                    [migration.version, migration.name])  # fmt: skip
    con.execute("INSERT INTO jobs (job_id, \"user\", source) VALUES ('42', 'bob', 'old')")
    con.close()
    with Store(path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
        assert store.query("SELECT job_id FROM jobs").to_pylist() == [{"job_id": "42"}]
        upsert_alerts(store, [_alert()]).result()
        assert [a.job_id for a in alerts(store, Principal("bob", Role.RESEARCHER).job_scope())] == [
            "42"
        ]


def test_the_jobs_with_alerts_are_read_once_then_follow_the_writes(tmp_path: Path) -> None:
    """After one read, the jobs with an alert are known without a query: those read, and
    those whose alerts were written since (a job's page asks after every alert write)."""
    store = Store(tmp_path / "s.duckdb")
    try:
        upsert_alerts(store, [_alert("42")]).result()
        assert known_job_ids_with_alerts(store) is None  # never read
        assert job_ids_with_alerts(store) == {"42"}
        upsert_alerts(store, [_alert("43"), _alert(None, rule="RD-4")]).result()
        set_alert_state(store, _alert("42").key, AlertState.RESOLVED, by="admin", at=T).result()
        assert known_job_ids_with_alerts(store) == frozenset({"42", "43"})
        assert job_ids_with_alerts(store) == {"42", "43"}
    finally:
        store.close()
