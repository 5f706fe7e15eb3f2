"""Alerts: upsert by deduplication key, state changes, scoped reads (``alerts``, migrations 9
and 18).

An alert is stored once per :func:`~hpcscope.model.alerts.dedup_key`. Upserting one already
stored adds its ``count``, widens ``first_seen``/``last_seen``, keeps the higher severity,
takes the newer step, evidence, container and pod, and **keeps the state** (an acknowledged
alert firing again stays acknowledged, and says so with its growing count). Acknowledge and
resolve record who and when.

Reads take the principal's :class:`~hpcscope.model.access.JobScope` and apply it through the
``jobs`` table, as the job reports do: an alert on a job the scope does not admit, or on no
known job, is visible to admins only (deny by default). Once loaded, the table is read from
memory (:mod:`hpcscope.store.alert_index`, kept by the writes here), with the same answer.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

import duckdb
import orjson
import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert, AlertState, Severity, Vector
from hpcscope.model.kept_alerts import KeptPerAlert
from hpcscope.store import alert_index
from hpcscope.store.alert_index import AlertFilter
from hpcscope.store.duck import Store
from hpcscope.store.filters import Where

_COLUMNS = (
    "dedup_key", "rule_id", "vector", "severity", "title", "first_seen", "last_seen", "count",
    "node", "job_id", "user", "account", "gpu", "subject", "step", "evidence_json", "state",
    "state_by", "state_at", "container", "pod",
)  # fmt: skip

T = TypeVar("T")
_alert = alert_index.alert_from_row

#: Evidence items kept per alert (the newest firing's).
MAX_EVIDENCE = 20


def _row(alert: Alert) -> tuple[object, ...]:
    evidence = orjson.dumps([e.to_dict() for e in alert.evidence[:MAX_EVIDENCE]]).decode()
    return (
        alert.key, alert.rule_id, int(alert.vector), int(alert.severity), alert.title,
        alert.first_seen, alert.last_seen, alert.count, alert.node, alert.job_id, alert.user,
        alert.account, alert.gpu, alert.subject, alert.step, evidence, alert.state.value,
        alert.state_by, alert.state_at, alert.container, alert.pod,
    )  # fmt: skip


_TEXT, _INT, _TIME = pa.string(), pa.int64(), pa.timestamp("us")
_BATCH_SCHEMA = pa.schema(
    list(
        zip(
            _COLUMNS,
            (_TEXT, _TEXT, _INT, _INT, _TEXT, _TIME, _TIME, _INT, _TEXT, _TEXT, _TEXT, _TEXT,
             _INT, _TEXT, _INT, _TEXT, _TEXT, _TEXT, _TIME, _TEXT, _TEXT),
            strict=True,
        )
    )
)  # fmt: skip
"""The Arrow types of :data:`_COLUMNS`, for the upsert's batch."""

_UPSERT = (
    "ON CONFLICT (dedup_key) DO UPDATE SET "
    "count = alerts.count + excluded.count, "
    "first_seen = least(alerts.first_seen, excluded.first_seen), "
    "last_seen = greatest(alerts.last_seen, excluded.last_seen), "
    "severity = greatest(alerts.severity, excluded.severity), "
    "title = excluded.title, "
    "step = coalesce(excluded.step, alerts.step), "
    "evidence_json = excluded.evidence_json, "
    'node = coalesce(alerts.node, excluded.node), "user" = coalesce(excluded."user", '
    'alerts."user"), account = coalesce(excluded.account, alerts.account), '
    "container = coalesce(excluded.container, alerts.container), "
    "pod = coalesce(excluded.pod, alerts.pod)"
)


def _as_one_per_key(alerts: Sequence[Alert]) -> Sequence[Alert]:
    """The batch with one alert per key, merged as upserting them in turn would merge them."""
    if len({a.key for a in alerts}) == len(alerts):
        return alerts
    merged: dict[str, Alert] = {}
    for alert in alerts:
        old = merged.get(alert.key)
        merged[alert.key] = (
            alert
            if old is None
            else replace(
                alert,
                count=old.count + alert.count,
                first_seen=min(old.first_seen, alert.first_seen),
                last_seen=max(old.last_seen, alert.last_seen),
                severity=max(old.severity, alert.severity),
                step=alert.step if alert.step is not None else old.step,
                node=old.node if old.node is not None else alert.node,
                user=alert.user if alert.user is not None else old.user,
                account=alert.account if alert.account is not None else old.account,
                container=alert.container if alert.container is not None else old.container,
                pod=alert.pod if alert.pod is not None else old.pod,
            )
        )
    return list(merged.values())


def upsert_alerts(store: Store, alerts: Sequence[Alert]) -> Future[int]:
    """Insert new alerts, merge repeated ones (see module docstring).

    One ``INSERT ... SELECT`` of the batch (as an Arrow table) with ``ON CONFLICT``: DuckDB's
    ``executemany`` runs the statement once per row. Alerts of one key in the batch are merged
    first, as upserting them one by one would.

    Returns:
        A future with the number of alerts written (new or merged).
    """
    rows = [_row(alert) for alert in _as_one_per_key(alerts)]
    names = ", ".join(f'"{c}"' for c in _COLUMNS)
    batch = pa.Table.from_pylist(
        [dict(zip(_COLUMNS, row, strict=True)) for row in rows], schema=_BATCH_SCHEMA
    )

    def write(con: duckdb.DuckDBPyConnection) -> tuple[int, list[dict[str, object]]]:
        seq = alert_index.next_write(store, con)
        if not rows:
            return seq, []
        con.register("incoming_alerts", batch)
        try:
            stored = _returned(
                con.execute(
                    f"INSERT INTO alerts ({names}) SELECT {names} FROM incoming_alerts "
                    f"{_UPSERT} RETURNING *"
                )
            )
        finally:
            con.unregister("incoming_alerts")
        return seq, stored

    jobs = frozenset(str(row[_JOB_ID]) for row in rows if row[_JOB_ID] is not None)

    def written(stored: list[dict[str, object]]) -> int:
        if stored:
            _note_written(store, jobs)
        return len(stored)

    return _indexed(store, store.submit_write(write), written)


def _returned(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, object]]:
    """The rows a ``RETURNING *`` statement stored, by column name."""
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def _indexed(
    store: Store,
    write: Future[tuple[int, list[dict[str, object]]]],
    then: Callable[[list[dict[str, object]]], T],
) -> Future[T]:
    """A future with ``then(rows)`` once the alert write committed and its rows are in the
    store's alert index (:mod:`hpcscope.store.alert_index`), its counts noted: whoever waits
    on the write reads the index and counts with it."""
    future: Future[T] = Future()

    def done(finished: Future[tuple[int, list[dict[str, object]]]]) -> None:
        error = finished.exception()
        if error is not None:
            future.set_exception(error)
            return
        seq, stored = finished.result()
        alert_index.written(store, seq, stored)
        try:
            value = then(stored)
        except BaseException as exc:  # the waiter sees it
            future.set_exception(exc)
        else:
            future.set_result(value)

    write.add_done_callback(done)
    return future


_JOB_ID = _COLUMNS.index("job_id")
_WRITTEN: weakref.WeakKeyDictionary[Store, int] = weakref.WeakKeyDictionary()
#: Per store, the upserts that wrote an alert of each job (a job's alert never changes job: the
#: upsert leaves ``job_id`` as inserted). One count per job that ever had an alert: what the
#: alerts table holds, not the requests served.
_WRITTEN_BY_JOB: weakref.WeakKeyDictionary[Store, dict[str, int]] = weakref.WeakKeyDictionary()
_WRITTEN_LOCK = threading.Lock()


def _note_written(store: Store, jobs: frozenset[str]) -> None:
    with _WRITTEN_LOCK:
        _WRITTEN[store] = _WRITTEN.get(store, 0) + 1
        by_job = _WRITTEN_BY_JOB.setdefault(store, {})
        for job_id in jobs:
            by_job[job_id] = by_job.get(job_id, 0) + 1


def alerts_written(store: Store, *, job_id: str | None = None) -> int:
    """How many upserts of alerts have committed in ``store`` since it was opened (by any
    engine, in the collector's cycle or beside it), or of ``job_id``'s alerts: a read view of
    alerts keys on it, so a new alert is seen by the next read (a job's page on its job's
    count: another job's alert leaves it as it is)."""
    with _WRITTEN_LOCK:
        if job_id is None:
            return _WRITTEN.get(store, 0)
        return _WRITTEN_BY_JOB.get(store, {}).get(job_id, 0)


def set_alert_state(
    store: Store, key: str, state: AlertState, *, by: str, at: datetime
) -> Future[bool]:
    """Acknowledge, resolve or reopen one alert, recording who and when.

    Returns:
        A future with whether an alert with that key exists.
    """

    def write(con: duckdb.DuckDBPyConnection) -> tuple[int, list[dict[str, object]]]:
        seq = alert_index.next_write(store, con)
        return seq, _returned(
            con.execute(
                "UPDATE alerts SET state = ?, state_by = ?, state_at = ? WHERE dedup_key = ? "
                "RETURNING *",
                [state.value, by, at, key],
            )
        )

    return _indexed(store, store.submit_write(write), bool)


def alerts(
    store: Store,
    scope: JobScope,
    *,
    job_id: str | None = None,
    states: Sequence[AlertState] | None = None,
    min_severity: Severity | None = None,
    key: str | None = None,
    vector: Vector | None = None,
    limit: int = 500,
    as_read: bool = False,
) -> list[Alert]:
    """Stored alerts ``scope`` admits, most severe and most recent first.

    Args:
        scope: the principal's job scope (applied through ``jobs``: user and account there).
        job_id: only this job's alerts.
        states: only alerts in these states.
        min_severity: only alerts at least this severe.
        key: only the alert with this deduplication key.
        vector: only alerts of this threat vector.
        limit: at most this many.
        as_read: from the alert index, with the jobs' owners as the collector last read them
            (:func:`~hpcscope.store.alert_index.owners_as_read`), never a query for them.
    """
    wanted = AlertFilter(
        job_id=job_id,
        states=None if states is None else tuple(AlertState(s) for s in states),
        min_severity=min_severity,
        key=key,
        vector=vector,
        limit=limit,
    )
    indexed = alert_index.indexed_alerts(store, scope, wanted, as_read=as_read)
    if indexed is not None:  # the table in memory, kept by the writes
        return indexed
    return queried_alerts(store, scope, wanted)


def alerts_in_memory(store: Store) -> bool:
    """Whether :func:`alerts` answers now from memory, without a query."""
    return alert_index.in_memory(store)


def owners_read_version(store: Store) -> int | None:
    """The version of the jobs' owners :func:`alerts` takes ``as_read`` (None before a
    first read: it would query)."""
    return alert_index.owners_read_version(store)


def queried_alerts(
    store: Store, scope: JobScope, wanted: AlertFilter = AlertFilter()
) -> list[Alert]:
    """:func:`alerts` as the store answers it (a store without an alert index)."""
    where = Where().equals("a.job_id", wanted.job_id).equals("a.dedup_key", wanted.key)
    where.equals("a.vector", None if wanted.vector is None else int(wanted.vector))
    if wanted.states is not None:
        where.among("a.state", [s.value for s in wanted.states])
    if wanted.min_severity is not None:
        where.clauses.append("a.severity >= ?")
        where.params.append(int(wanted.min_severity))
    scope_sql, scope_params = Store.scope_sql(
        scope, user_column='j."user"', account_column="j.account"
    )
    join = "LEFT JOIN" if scope.all_jobs else "JOIN"
    where.clauses.append(scope_sql)
    where.params.extend(scope_params)
    table = store.query(
        f'SELECT a.* EXCLUDE ("user", account), coalesce(j."user", a."user") AS "user", '
        "coalesce(j.account, a.account) AS account "
        f"FROM alerts a {join} jobs j ON j.job_id = a.job_id {where.sql()} "
        f"ORDER BY a.severity DESC, a.last_seen DESC, a.dedup_key LIMIT {int(wanted.limit)}",
        where.params,
    )
    return _alerts_of(table)


#: Alerts built from stored rows, one per alert (its key; the newest row replaces the older),
#: least recently used out first: a list read again after one alert changed builds that one
#: alone (its evidence parsed, its fields converted), not every alert it shows.
ROW_ALERTS = 8192
_ROW_ALERTS: KeptPerAlert[Alert] = KeptPerAlert(ROW_ALERTS)


def _alert_of(names: tuple[str, ...], values: tuple[object, ...]) -> Alert:
    key = (names, values[names.index("dedup_key")] if "dedup_key" in names else values)
    return _ROW_ALERTS.get(key, values, lambda: _alert(dict(zip(names, values, strict=True))))


def _alerts_of(table: pa.Table) -> list[Alert]:
    """The alerts of ``table``'s rows, in order (:func:`_alert` of each, through
    :data:`ROW_ALERTS`: equal rows give the very same, immutable, alert)."""
    names = tuple(table.column_names)
    columns = [table.column(name).to_pylist() for name in names]
    return [_alert_of(names, values) for values in zip(*columns, strict=True)]


def job_ids_with_alerts(store: Store) -> frozenset[str]:
    """The jobs that have at least one stored alert (in any state); remembered for
    :func:`known_job_ids_with_alerts`."""
    table = store.query("SELECT DISTINCT job_id FROM alerts WHERE job_id IS NOT NULL")
    found = frozenset(str(v) for v in table.column("job_id").to_pylist())
    with _WRITTEN_LOCK:
        _READ_JOBS[store] = found
    return found


#: Per store, the jobs with an alert as :func:`job_ids_with_alerts` last read them.
_READ_JOBS: weakref.WeakKeyDictionary[Store, frozenset[str]] = weakref.WeakKeyDictionary()


def known_job_ids_with_alerts(store: Store) -> frozenset[str] | None:
    """:func:`job_ids_with_alerts` without a query: the jobs it last read and those whose
    alerts were written since (an alert is never deleted, nor moved to another job); None
    before its first read. At 128 nodes the engines write alerts several times a second, and
    each write read the jobs from the store again before a job's page could be answered."""
    with _WRITTEN_LOCK:
        read = _READ_JOBS.get(store)
        if read is None:
            return None
        return read | frozenset(_WRITTEN_BY_JOB.get(store, {}))


def job_owners(store: Store, job_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """User and account of each known job among ``job_ids`` (from ``jobs``: Slurm's view)."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    table = store.query(
        f'SELECT job_id, "user", account FROM jobs WHERE job_id IN ({marks})', wanted
    )
    return {str(r["job_id"]): (r["user"], r["account"]) for r in table.to_pylist()}


def recent_alerts(store: Store, rule_ids: Sequence[str], *, since: datetime) -> list[Alert]:
    """Stored alerts of ``rule_ids`` last seen at or after ``since`` (for correlation rules:
    every job, the engine's own read; never served to a person)."""
    if not rule_ids:
        return []
    marks = ", ".join("?" for _ in rule_ids)
    table = store.query(
        f"SELECT * FROM alerts WHERE rule_id IN ({marks}) AND last_seen >= ? "
        "ORDER BY last_seen LIMIT 10000",
        [*rule_ids, since],
    )
    return [_alert(row) for row in table.to_pylist()]
