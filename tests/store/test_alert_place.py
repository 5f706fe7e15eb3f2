"""An alert's container and pod as their own columns (migration 18): stored, read, merged with
the newest firing's, and a store written before them upgrades in place with its alerts kept and
their container or pod taken from the evidence that named it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa

from hpcscope.model.access import JobScope, Principal, Role
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.store import Store
from hpcscope.store.alerts import _COLUMNS, _row, alerts, set_alert_state, upsert_alerts
from hpcscope.store.migrations import MIGRATIONS

T = datetime(2026, 12, 6, 5, 0, 0)
ADMIN = JobScope(all_jobs=True)
GPU = "GPU not known: a syscall event names a process, not a GPU"
#: The store as the commit before migration 18 wrote it.
BEFORE = tuple(m for m in MIGRATIONS if m.version < 18)


def _alert(summary: str, *, job: str | None = None, subject: str = "nsenter") -> Alert:
    return Alert(
        "CE-3", Vector.CONTAINER_ESCAPE, Severity.HIGH, "namespace entry into PID 1", T, T,
        node="gpu-01", job_id=job, subject=subject,
        evidence=(Evidence(f"{summary}; {GPU}", "falco.jsonl", "line 3"),),
    )  # fmt: skip


def test_container_and_pod_are_stored_read_and_served(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        placed = replace(_alert("nsenter -t 1"), container="trainer", pod="ml/trainer-0")
        upsert_alerts(store, [placed, _alert("nsenter -t 1", subject="bare host")]).result()
        got = {a.subject: (a.container, a.pod) for a in alerts(store, ADMIN)}
        assert got == {"nsenter": ("trainer", "ml/trainer-0"), "bare host": (None, None)}
        [doc] = [a.to_dict() for a in alerts(store, ADMIN) if a.container]
        assert (doc["container"], doc["pod"], doc["job_id"]) == ("trainer", "ml/trainer-0", None)


def test_a_repeat_keeps_the_newest_known_container_and_pod(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        first = replace(_alert("x"), container="a", pod="ns/p")
        later = replace(first, last_seen=T + timedelta(minutes=1), container="b", pod=None)
        upsert_alerts(store, [first]).result()
        upsert_alerts(store, [later]).result()
        [stored] = alerts(store, ADMIN)
        assert (stored.count, stored.container, stored.pod) == (2, "b", "ns/p")
        # the same merge inside one batch
        upsert_alerts(store, [replace(first, container=None), later]).result()
        assert alerts(store, ADMIN)[0].container == "b"


def test_node_scoped_alerts_stay_hidden_from_researchers(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        rows = [{"job_id": "42", "user": "bob", "account": "nlp", "source": "test"}]
        store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()
        in_pod = replace(_alert("x"), container="c", pod="ns/p")
        upsert_alerts(store, [in_pod, replace(in_pod, job_id="42", subject="in job")]).result()
        bob = alerts(store, Principal("bob", Role.RESEARCHER).alert_scope())
        assert [a.job_id for a in bob] == ["42"]
        security = alerts(store, Principal("sec", Role.SECURITY).alert_scope())
        assert {a.job_id for a in security} == {"42", None}


def _write_as_before(con: duckdb.DuckDBPyConnection, written: list[Alert]) -> None:
    """The alerts as the commit before migration 18 upserted them: its 19 columns."""
    for alert in written:
        row = _row(alert)[: len(_COLUMNS) - 2]
        assert _COLUMNS[len(row) :] == ("container", "pod")
        con.execute(f"INSERT INTO alerts VALUES ({', '.join('?' for _ in row)})", list(row))


def test_a_store_from_before_the_columns_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    old_alerts = [
        _alert("nsenter -t 1 by root in pod ml/trainer-0", subject="pod"),
        _alert("nsenter -t 1 by root in container 3ad7b26ded6d", subject="container"),
        _alert("nsenter -t 1 by root", subject="host"),
        replace(_alert("step 3", subject="no evidence"), evidence=()),
    ]
    with Store(path, migrations=BEFORE) as old:
        assert old.schema_version() == 17
        old.submit_write(lambda con: _write_as_before(con, old_alerts)).result()
        set_alert_state(old, old_alerts[0].key, AlertState.ACKNOWLEDGED, by="sec", at=T).result()
    with Store(path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
        got = {a.subject: a for a in alerts(store, ADMIN)}
        assert {s: (a.container, a.pod) for s, a in got.items()} == {
            "pod": (None, "ml/trainer-0"),
            "container": ("3ad7b26ded6d", None),
            "host": (None, None),
            "no evidence": (None, None),
        }
        assert got["pod"].state is AlertState.ACKNOWLEDGED and got["pod"].state_by == "sec"
        assert {a.key for a in got.values()} == {a.key for a in old_alerts}
        assert {a.subject: a.evidence for a in old_alerts} == {
            s: a.evidence for s, a in got.items()
        }
        upsert_alerts(store, [replace(old_alerts[2], container="late")]).result()
        assert {a.subject: a.count for a in alerts(store, ADMIN)}["host"] == 2
