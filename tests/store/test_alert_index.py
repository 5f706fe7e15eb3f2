"""The alert index (``store/alert_index.py``): after any sequence of upserts, state changes and
job changes, every scope's list and the diagram's open-alert counts are what the store's
queries answer; once loaded they are read without a query; the alerts' rendering caches hold
one entry per alert, not one per version."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.service.alerts import documents
from hpcscope.store import Store, alert_index
from hpcscope.store import alerts as alert_store
from hpcscope.store import diagram as diagram_queries
from hpcscope.store.alert_index import AlertFilter
from hpcscope.store.alerts import alerts, queried_alerts, set_alert_state, upsert_alerts
from tests.store.test_alert_place import BEFORE, _write_as_before

T = datetime(2026, 12, 6, 12, 0, 0)
ADMIN = JobScope(all_jobs=True)
SCOPES = (
    ADMIN,
    JobScope(all_jobs=False, users=frozenset({"u1"})),
    JobScope(all_jobs=False, accounts=frozenset({"a2"})),
    JobScope(all_jobs=False, users=frozenset({"u2"}), accounts=frozenset({"a1"})),
    JobScope(all_jobs=False),
)
FILTERS: tuple[dict[str, Any], ...] = (
    {},
    {"states": [AlertState.OPEN]},
    {"states": [AlertState.ACKNOWLEDGED, AlertState.RESOLVED]},
    {"min_severity": Severity.HIGH},
    {"vector": Vector.RDMA},
    {"job_id": "j1"},
    {"job_id": "j9"},
    {"limit": 3},
    {"min_severity": Severity.MEDIUM, "states": [AlertState.OPEN], "limit": 2},
)
JOBS = ("j1", "j2", "j3", "j9", None)  # j9 never in ``jobs``; None: a node-scoped alert

alert_specs = st.builds(
    lambda rule, job, node, subject, severity, vector, minutes, user, extra: Alert(
        rule,
        vector,
        severity,
        f"{rule} on {subject}",
        T + timedelta(minutes=minutes),
        T + timedelta(minutes=minutes, microseconds=extra),
        node=node,
        job_id=job,
        user=user,
        account=None if user is None else "a-" + user,
        gpu=None,
        subject=subject,
        step=minutes or None,
        evidence=(Evidence(f"seen {minutes}", "spool", None),),
        container="c" if extra % 2 else None,
    ),
    st.sampled_from(("GI-1", "RD-4")),
    st.sampled_from(JOBS),
    st.sampled_from(("n1", "n2", None)),
    st.sampled_from(("rank 0", "rank 1")),
    st.sampled_from(tuple(Severity)),
    st.sampled_from((Vector.RDMA, Vector.GRADIENT_INJECTION, Vector.SERVICE_LEVEL)),
    st.integers(0, 30),
    st.sampled_from(("u1", "u2", None)),
    st.integers(0, 3),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(alert_specs, min_size=0, max_size=4)),
        st.tuples(st.just("state"), st.integers(0, 50), st.sampled_from(tuple(AlertState))),
        st.tuples(
            st.just("job"),
            st.sampled_from(("j1", "j2", "j3")),
            st.sampled_from(("u1", "u2", "u3", None)),
            st.sampled_from(("a1", "a2", None)),
        ),
        st.tuples(st.just("forget"), st.sampled_from(("j1", "j2", "j3"))),
    ),
    min_size=1,
    max_size=12,
)


def _job(store: Store, job_id: str, user: str | None, account: str | None) -> None:
    row = {"job_id": job_id, "user": user, "account": account, "source": "test"}
    store.submit_write(lambda con: con.execute("DELETE FROM jobs WHERE job_id = ?", [job_id]))
    store.upsert_jobs(pa.Table.from_pylist([row], schema=JOB_SCHEMA)).result()


def _forget(store: Store, job_id: str) -> None:
    store.submit_write(
        lambda con: con.execute("DELETE FROM jobs WHERE job_id = ?", [job_id]).fetchall()
    ).result()


def _counts(rows: list[Any] | None) -> list[tuple[Any, ...]]:
    assert rows is not None
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def _same_as_the_store(store: Store) -> None:
    for scope in SCOPES:
        for filters in FILTERS:
            assert alerts(store, scope, **filters) == queried_alerts(
                store, scope, AlertFilter(**filters)
            )
    for key in {a.key for a in queried_alerts(store, ADMIN)} | {"no-such-key"}:
        for scope in SCOPES:
            assert alerts(store, scope, key=key) == queried_alerts(
                store, scope, AlertFilter(key=key)
            )
    indexed = diagram_queries.open_alert_counts(store)
    queried = store.query(diagram_queries._OPEN_ALERT_COUNTS_SQL, ["resolved"]).to_pylist()
    assert _counts(indexed) == _counts(queried)
    assert indexed is not None and [(r["vector"], r["node"] is None, r["node"], r["severity"])
                                    for r in indexed] == sorted(
        (r["vector"], r["node"] is None, r["node"], r["severity"]) for r in queried
    )  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_the_index_answers_what_the_store_does_after_any_writes(ops: list[Any]) -> None:
    with Store(":memory:") as store:
        _job(store, "j1", "u1", "a1")
        _job(store, "j2", "u2", "a2")
        for op in ops:
            if op[0] == "upsert":
                upsert_alerts(store, op[1]).result()
            elif op[0] == "state":
                keys = [a.key for a in queried_alerts(store, ADMIN)]
                key = keys[op[1] % len(keys)] if keys else "no-such-key"
                changed = set_alert_state(store, key, op[2], by="sec", at=T).result()
                assert changed == bool(keys)
            elif op[0] == "job":
                _job(store, op[1], op[2], op[3])
            else:  # a job renamed away: its alerts are on no known job
                _forget(store, op[1])
            assert alerts(store, ADMIN) == queried_alerts(store, ADMIN)
        _same_as_the_store(store)


def test_lists_and_counts_are_read_without_a_query_after_alert_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alert writes (8 a second at 128 nodes) change no job: after them, the lists of every
    scope and the diagram's counts are derived from memory; a job's write reads owners again."""
    with Store(":memory:") as store:
        _job(store, "j1", "u1", "a1")
        first = Alert("GI-1", Vector.RDMA, Severity.HIGH, "t", T, T, node="n1", job_id="j1")
        upsert_alerts(store, [first]).result()
        assert [a.key for a in alerts(store, SCOPES[1])] == [first.key]  # owners read once
        later = replace(first, severity=Severity.CRITICAL, last_seen=T + timedelta(minutes=1))
        upsert_alerts(store, [later, replace(first, subject="rank 2")]).result()
        set_alert_state(store, first.key, AlertState.ACKNOWLEDGED, by="u1", at=T).result()
        expected = queried_alerts(store, SCOPES[1])
        counts = _counts(store.query(diagram_queries._OPEN_ALERT_COUNTS_SQL, ["x"]).to_pylist())

        def no_query(*_: object, **__: object) -> None:
            raise AssertionError("the store was queried")

        monkeypatch.setattr(store, "query", no_query)
        assert alerts(store, SCOPES[1]) == expected and len(expected) == 2
        assert alerts(store, ADMIN, states=[AlertState.ACKNOWLEDGED])[0].state_by == "u1"
        assert _counts(diagram_queries.open_alert_counts(store)) == counts
        monkeypatch.undo()
        _job(store, "j1", "u2", "a1")  # the job's owner changes: read again
        assert alerts(store, SCOPES[1]) == [] == queried_alerts(store, SCOPES[1])


def test_a_store_from_before_the_place_columns_is_indexed_at_its_first_alert_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    old = [
        Alert("CE-3", Vector.CONTAINER_ESCAPE, Severity.HIGH, "t", T, T, node="n", subject=s)
        for s in ("a", "b")
    ]
    with Store(path, migrations=BEFORE) as before:
        before.submit_write(lambda con: _write_as_before(con, old)).result()
        assert set_alert_state(before, old[0].key, AlertState.RESOLVED, by="s", at=T).result()
        assert alert_index.index_of(before) is None  # no place columns: queried
    with Store(path) as store:
        assert alert_index.index_of(store) is None  # nothing written yet: queried
        upsert_alerts(store, [replace(old[1], container="c1")]).result()
        index = alert_index.index_of(store)
        assert index is not None and len(index) == 2
        _same_as_the_store(store)


def test_the_rendering_caches_keep_one_entry_per_alert_not_per_version() -> None:
    """Each write of an alert is a new version (its count, its last firing): the document
    bytes and built rows are kept once per alert, the newer replacing the older."""
    documents._FRAGMENTS.clear()
    alert_store._ROW_ALERTS.clear()
    with Store(":memory:") as store:
        alert = Alert("GI-1", Vector.RDMA, Severity.LOW, "t", T, T, node="n1", subject="x")
        for minute in range(40):
            at = T + timedelta(minutes=minute)
            upsert_alerts(store, [replace(alert, first_seen=at, last_seen=at)]).result()
            [stored] = alerts(store, ADMIN)
            assert stored.count == minute + 1
            assert documents.alert_bytes(stored) == documents.alert_bytes(stored)
            assert b'"count":%d' % (minute + 1) in documents.alert_bytes(stored)
            queried_alerts(store, ADMIN)
    assert len(documents._FRAGMENTS) == 1 and len(alert_store._ROW_ALERTS) == 1


def test_the_counts_version_moves_with_the_open_counts_not_with_repeats() -> None:
    """The diagram keys its counts on it: an alert's repeat firing (most of the engines'
    writes) or an acknowledgement leaves it; a new alert, a resolution or a job's write moves
    it."""
    with Store(":memory:") as store:
        assert alert_index.open_counts_version(store) is None  # no alert written yet
        alert = Alert("GI-1", Vector.RDMA, Severity.HIGH, "t", T, T, node="n1", job_id="j1")
        upsert_alerts(store, [alert]).result()
        first = alert_index.open_counts_version(store)
        upsert_alerts(store, [replace(alert, last_seen=T + timedelta(minutes=1))]).result()
        set_alert_state(store, alert.key, AlertState.ACKNOWLEDGED, by="s", at=T).result()
        assert alert_index.open_counts_version(store) == first
        upsert_alerts(store, [replace(alert, subject="rank 2")]).result()
        second = alert_index.open_counts_version(store)
        assert second != first
        set_alert_state(store, alert.key, AlertState.RESOLVED, by="s", at=T).result()
        third = alert_index.open_counts_version(store)
        assert third not in (first, second)
        _job(store, "j1", "u1", "a1")
        assert alert_index.open_counts_version(store) != third
        rows = diagram_queries.open_alert_counts(store)
        assert rows is not None and [(r["user"], r["open"]) for r in rows] == [("u1", 1)]
