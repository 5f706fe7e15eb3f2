"""The alerts table in memory, kept by the alert writes: the alert lists and the diagram's
open-alert counts derived from it without a query.

At 128 nodes the engines write alerts about 8 times a second, and each write made every view
of the alerts read again: the list per access scope (about 5 ms a query, ~27 a second) and the
diagram's open-alert counts (9 ms). Every write of the table goes through
:func:`~hpcscope.store.alerts.upsert_alerts` or :func:`~hpcscope.store.alerts.set_alert_state`,
each of which returns the rows as stored (``RETURNING``), and an alert is never deleted nor
moved to another job. So the table is read once, by the store's first alert write on the
writer thread (no write in between), and each write replaces its rows here after it commits,
in write order (a sequence number taken on the writer thread: a late callback never replaces
a newer row). What it holds
is the table's rows, one :class:`~hpcscope.model.alerts.Alert` per deduplication key.

Scopes apply through ``jobs`` as the query does (the job's user and account; an alert on no
known job is visible to admins only): the owners of the jobs with alerts are read again only
after a write other than an alert's (a collector cycle may rename or add jobs), not per alert
write. A store without the alerts table's columns (an older store opened with its early
migrations), or one no alert was written to since it was opened (read-only), has no index:
its reads stay queries.
"""

from __future__ import annotations

import bisect
import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import duckdb
import orjson
import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.store.duck import Store

log = logging.getLogger(__name__)

#: The columns a row needs to become an alert (migrations 9 and 18).
NEEDED_COLUMNS = frozenset(
    {"dedup_key", "rule_id", "vector", "severity", "title", "first_seen", "last_seen", "count",
     "node", "job_id", "user", "account", "gpu", "subject", "step", "evidence_json", "state",
     "state_by", "state_at", "container", "pod"}
)  # fmt: skip

Owners = Mapping[str, tuple[str | None, str | None]]
"""A known job's user and account (``jobs``), by job id; a job not there is not known."""


@dataclass(frozen=True, slots=True)
class AlertFilter:
    """Which alerts a read wants (:func:`hpcscope.store.alerts.alerts`' arguments), answered
    alike by the index and by the query."""

    job_id: str | None = None
    states: tuple[AlertState, ...] | None = None
    min_severity: Severity | None = None
    key: str | None = None
    vector: Vector | None = None
    limit: int = 500


def alert_from_row(row: Mapping[str, object]) -> Alert:
    """The alert of one stored row (``SELECT *`` or ``RETURNING *`` of ``alerts``)."""
    evidence = tuple(
        Evidence(
            summary=str(e["summary"]),
            source=str(e["source"]),
            position=e.get("position"),
            link=e.get("link"),
        )
        for e in orjson.loads(str(row["evidence_json"]))
    )
    gpu, step = row["gpu"], row["step"]
    return Alert(
        rule_id=str(row["rule_id"]),
        vector=Vector(int(row["vector"])),  # type: ignore[call-overload]
        severity=Severity(int(row["severity"])),  # type: ignore[call-overload]
        title=str(row["title"]),
        first_seen=row["first_seen"],  # type: ignore[arg-type]
        last_seen=row["last_seen"],  # type: ignore[arg-type]
        count=int(row["count"]),  # type: ignore[call-overload]
        node=row["node"],  # type: ignore[arg-type]
        job_id=row["job_id"],  # type: ignore[arg-type]
        user=row["user"],  # type: ignore[arg-type]
        account=row["account"],  # type: ignore[arg-type]
        gpu=None if gpu is None else int(gpu),  # type: ignore[call-overload]
        subject=row["subject"],  # type: ignore[arg-type]
        step=None if step is None else int(step),  # type: ignore[call-overload]
        evidence=evidence,
        state=AlertState(str(row["state"])),
        state_by=row["state_by"],  # type: ignore[arg-type]
        state_at=row["state_at"],  # type: ignore[arg-type]
        container=row["container"],  # type: ignore[arg-type]
        pod=row["pod"],  # type: ignore[arg-type]
    )


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_Order = tuple[int, int, str]
_Group = tuple[Vector, str | None, Severity, str | None]


def _order(key: str, alert: Alert) -> _Order:
    """The query's order (severity, then last seen, descending; then the key) as one tuple."""
    last_seen = alert.last_seen.replace(tzinfo=None)
    return (-int(alert.severity), -((last_seen - _EPOCH) // _MICROSECOND), key)


def _group(alert: Alert) -> _Group:
    return (alert.vector, alert.node, alert.severity, alert.job_id)


class AlertIndex:
    """The alerts of one store by deduplication key, in the lists' order, by job, and their
    open (not resolved) counts per vector, node, severity and job."""

    def __init__(self, rows: Sequence[tuple[str, Alert]], *, seq: int) -> None:
        self._lock = threading.Lock()
        self._alerts: dict[str, Alert] = {}
        self._seq: dict[str, int] = {}
        self._floor = seq
        self._order: list[_Order] = []
        self._orders: dict[str, _Order] = {}
        self._by_job: dict[str | None, set[str]] = {}
        self._open: dict[_Group, int] = {}
        self._shown: dict[str, tuple[Alert, Alert]] = {}
        self.commits = 0  # alert writes committed after the load (their callbacks' count)
        self.open_version = 0  # changes of the open counts (an alert's repeat leaves them)
        self._counted: tuple[int, Owners, list[dict[str, object]]] | None = None
        for key, alert in rows:
            self._put(key, alert, seq)

    def _put(self, key: str, alert: Alert, seq: int) -> None:
        old = self._alerts.get(key)
        was = None if old is None or old.state is AlertState.RESOLVED else _group(old)
        now = None if alert.state is AlertState.RESOLVED else _group(alert)
        if old is not None:
            del self._order[bisect.bisect_left(self._order, self._orders[key])]
        if was != now:
            self.open_version += 1
            if was is not None:
                self._open[was] -= 1
                if not self._open[was]:
                    del self._open[was]
            if now is not None:
                self._open[now] = self._open.get(now, 0) + 1
        self._alerts[key] = alert
        self._seq[key] = seq
        order = self._orders[key] = _order(key, alert)
        bisect.insort(self._order, order)
        self._by_job.setdefault(alert.job_id, set()).add(key)

    def apply(self, seq: int, rows: Sequence[tuple[str, Alert]]) -> None:
        """The rows a write (``seq``) stored; a row older than the one held is ignored."""
        with self._lock:
            if seq <= self._floor:  # the load read it (and its commit was counted before)
                return
            self.commits += 1
            for key, alert in rows:
                if self._seq.get(key, self._floor) < seq:
                    self._put(key, alert, seq)

    def job_ids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(j for j in self._by_job if j is not None)

    def __len__(self) -> int:
        return len(self._alerts)

    def _shown_as(self, key: str, alert: Alert, owner: tuple[str | None, str | None]) -> Alert:
        """``alert`` with the job's user and account where ``jobs`` has them (the query's
        ``coalesce(j.user, a.user)``), the same object while they do not change."""
        user = owner[0] if owner[0] is not None else alert.user
        account = owner[1] if owner[1] is not None else alert.account
        if user == alert.user and account == alert.account:
            return alert
        kept = self._shown.get(key)
        if (
            kept is not None
            and kept[0] is alert
            and (kept[1].user, kept[1].account)
            == (
                user,
                account,
            )
        ):
            return kept[1]
        shown = replace(alert, user=user, account=account)
        self._shown[key] = (alert, shown)
        return shown

    def select(self, scope: JobScope, owners: Owners, wanted: AlertFilter) -> list[Alert]:
        """What :func:`hpcscope.store.alerts.alerts` answers, from memory."""
        job_id, key, min_severity, vector, limit = (
            wanted.job_id, wanted.key, wanted.min_severity, wanted.vector, wanted.limit
        )  # fmt: skip
        states = None if wanted.states is None else frozenset(wanted.states)
        found: list[Alert] = []
        if limit <= 0:
            return found
        with self._lock:
            if key is not None:
                candidates = [key] if key in self._alerts else []
            elif job_id is not None or not scope.all_jobs:
                jobs = (
                    [job_id]
                    if job_id is not None
                    else [
                        j
                        for j in self._by_job
                        if j is not None
                        and j in owners
                        and scope.admits(user=owners[j][0], account=owners[j][1])
                    ]
                )
                keys = [k for j in jobs for k in self._by_job.get(j, ())]
                candidates = sorted(keys, key=self._orders.__getitem__)
            else:
                candidates = [o[2] for o in self._order]
            for k in candidates:
                alert = self._alerts[k]
                if (
                    (job_id is not None and alert.job_id != job_id)
                    or (states is not None and alert.state not in states)
                    or (min_severity is not None and alert.severity < min_severity)
                    or (vector is not None and alert.vector != vector)
                ):
                    continue
                owner = owners.get(alert.job_id) if alert.job_id is not None else None
                if not scope.all_jobs and (
                    owner is None or not scope.admits(user=owner[0], account=owner[1])
                ):
                    continue
                found.append(alert if owner is None else self._shown_as(k, alert, owner))
                if len(found) >= limit:
                    break
        return found

    def open_groups(self) -> tuple[int, dict[_Group, int]]:
        """Open alerts per vector, node, severity and job, and :attr:`open_version`."""
        with self._lock:
            return self.open_version, dict(self._open)

    def counted(self, version: int, owners: Owners) -> list[dict[str, object]] | None:
        """The counts' rows made from ``version`` and ``owners``, if kept."""
        kept = self._counted
        if kept is not None and kept[0] == version and kept[1] is owners:
            return kept[2]
        return None

    def keep_counted(self, version: int, owners: Owners, rows: list[dict[str, object]]) -> None:
        self._counted = (version, owners, rows)


@dataclass(frozen=True, slots=True)
class _Owned:
    """The owners of the jobs with alerts as last read (:func:`owners`).

    Attributes:
        others: the writes other than alerts' when they were read.
        found: user and account of each known job among those asked.
        asked: the jobs asked (found or not).
        reads: how many reads changed ``found``: the version of the owners as read.
    """

    others: int
    found: Owners
    asked: frozenset[str]
    reads: int


_INDEXES: weakref.WeakKeyDictionary[Store, AlertIndex] = weakref.WeakKeyDictionary()
#: Stores that have no index (no alerts table with every column, or one dropped).
_NONE: weakref.WeakSet[Store] = weakref.WeakSet()
_SEQ: weakref.WeakKeyDictionary[Store, int] = weakref.WeakKeyDictionary()
_OWNERS: weakref.WeakKeyDictionary[Store, _Owned] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_OWNERS_LOCK = threading.Lock()


def next_write(store: Store, con: duckdb.DuckDBPyConnection) -> int:
    """The sequence number of an alert write, called first inside it (on the writer thread,
    where writes run one at a time and commit in order). The store's first alert write reads
    the table into the index before it writes: no other alert write can run meanwhile, and a
    read-only load of its own would count as a committed write (a new generation of every
    kept view)."""
    with _LOCK:
        seq = _SEQ.get(store, 0) + 1
        _SEQ[store] = seq
        loaded = store in _INDEXES or store in _NONE
    if not loaded:
        _load(store, con, floor=seq - 1)
    return seq


def _load(store: Store, con: duckdb.DuckDBPyConnection, *, floor: int) -> None:
    columns = {
        str(r[0])
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'alerts'"
        ).fetchall()
    }
    index: AlertIndex | None = None
    if columns >= NEEDED_COLUMNS:  # else an older store's: its reads stay queries
        cursor = con.execute("SELECT * FROM alerts")
        names = [d[0] for d in cursor.description or ()]
        try:
            rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
            index = AlertIndex([(str(r["dedup_key"]), alert_from_row(r)) for r in rows], seq=floor)
        except Exception:  # a row no alert can be built from: the queries say so
            log.exception("store %s: no alert index, alerts are read from the store", store.path)
    with _LOCK:
        if index is None:
            _NONE.add(store)
        else:
            _INDEXES[store] = index


def written(store: Store, seq: int, rows: Sequence[Mapping[str, object]]) -> None:
    """The rows alert write ``seq`` stored (``RETURNING *``), after it committed."""
    index = _INDEXES.get(store)
    if index is None:
        return
    try:
        index.apply(seq, [(str(row["dedup_key"]), alert_from_row(row)) for row in rows])
    except Exception:  # never a wrong answer: the reads go back to the store
        log.exception("store %s: alert index dropped, alerts read from the store", store.path)
        drop(store)


def drop(store: Store) -> None:
    """Forget ``store``'s index: its reads query the store from now on."""
    with _LOCK:
        _INDEXES.pop(store, None)
        _NONE.add(store)


def index_of(store: Store) -> AlertIndex | None:
    """``store``'s index, once its first alert write has loaded it."""
    with _LOCK:
        return _INDEXES.get(store)


def owners(store: Store, index: AlertIndex) -> Owners:
    """The user and account of the known jobs among those with alerts, read again after a
    write other than an alert's (a collector cycle's: a job added or renamed) or for a job
    whose first alert came since. The query runs outside the lock, so that :func:`in_memory`
    and :func:`owners_as_read` (asked on the web server's event loop) never wait for it."""
    jobs = index.job_ids()
    with _OWNERS_LOCK:
        others = store.writes_committed - index.commits  # alert writes never change jobs
        kept = _OWNERS.get(store)
        if kept is not None and kept.others == others and jobs <= kept.asked:
            return kept.found
        same = kept if kept is not None and kept.others == others else None
    ask = jobs - same.asked if same is not None else jobs
    found: dict[str, tuple[str | None, str | None]] = dict(same.found) if same else {}
    if ask:
        wanted = pa.table({"job_id": pa.array(sorted(ask), pa.string())})
        table = store.query(
            'SELECT j.job_id, j."user", j.account FROM jobs j '
            "JOIN wanted_jobs w ON w.job_id = j.job_id",
            tables={"wanted_jobs": wanted},
        )
        for row in table.to_pylist():
            found[str(row["job_id"])] = (row["user"], row["account"])
    asked = same.asked | jobs if same is not None else jobs
    with _OWNERS_LOCK:
        latest = _OWNERS.get(store)
        if latest is not None and latest.found == found:  # unchanged: the same version
            kept_found, reads = latest.found, latest.reads
        else:
            kept_found, reads = found, (latest.reads + 1 if latest is not None else 1)
        # the writes other than alerts' only grow: a read made after more of them wins
        if latest is None or (latest.others, len(latest.asked)) <= (others, len(asked)):
            _OWNERS[store] = _Owned(others, kept_found, asked, reads)
    return kept_found


def owners_as_read(store: Store) -> tuple[Owners, int] | None:
    """The owners as :func:`owners` last read them, and their version (how many reads
    changed them), without a query; None before a first read. A job whose first alert came
    since has none yet: its alerts count as a job's nobody owns, which only a principal who
    sees every alert sees."""
    with _OWNERS_LOCK:
        kept = _OWNERS.get(store)
    return (kept.found, kept.reads) if kept is not None else None


def in_memory(store: Store) -> bool:
    """Whether :func:`indexed_alerts` answers now without a query (its index loaded, the
    jobs' owners read since the last write other than an alert's)."""
    index = index_of(store)
    if index is None:
        return False
    jobs = index.job_ids()
    with _OWNERS_LOCK:
        kept = _OWNERS.get(store)
        others = store.writes_committed - index.commits
    if kept is not None and kept.others == others:
        return jobs <= kept.asked
    return not jobs  # no job's owner to read: nothing to ask the store


def indexed_alerts(
    store: Store, scope: JobScope, wanted: AlertFilter, *, as_read: bool = False
) -> list[Alert] | None:
    """:func:`hpcscope.store.alerts.alerts` from the index; None without one. ``as_read``:
    with the jobs' owners as last read, never a query (:func:`owners_as_read`), once read."""
    index = index_of(store)
    if index is None:
        return None
    read = owners_as_read(store) if as_read else None
    return index.select(scope, read[0] if read is not None else owners(store, index), wanted)


def owners_read_version(store: Store) -> int | None:
    """The version of the owners as last read (:func:`owners_as_read`) when the index answers
    from memory with them; None before."""
    if index_of(store) is None:
        return None
    read = owners_as_read(store)
    return None if read is None else read[1]


def open_counts_version(store: Store, *, as_read: bool = False) -> tuple[int, int, bool] | None:
    """What :func:`indexed_open_counts` depends on: the changes of the open counts (a new
    alert, one resolved or reopened; an alert's repeat firing, most writes, is none) and the
    writes other than an alert's (the jobs' owners), or with ``as_read`` the version of the
    owners as last read (:func:`owners_as_read`, once read), and which of the two it is (the
    numbers of the one never match the other's); None without an index. A view of the counts
    keyed on it is computed again only when they may differ."""
    index = index_of(store)
    if index is None:
        return None
    read = owners_as_read(store) if as_read else None
    if read is not None:
        return index.open_version, read[1], True
    return index.open_version, store.writes_committed - index.commits, False


def indexed_open_counts(
    store: Store, vector_names: Mapping[Vector, str], *, as_read: bool = False
) -> list[dict[str, object]] | None:
    """:func:`hpcscope.store.diagram.open_alert_counts` from the index (its rows, in its
    order); None without one. ``as_read``: with the jobs' owners as last read, never a query
    (:func:`owners_as_read`), once they were read."""
    index = index_of(store)
    if index is None:
        return None
    read = owners_as_read(store) if as_read else None
    known = read[0] if read is not None else owners(store, index)
    version, groups = index.open_groups()
    kept = index.counted(version, known)  # an alert's repeat leaves the counts as they were
    if kept is not None:
        return kept
    counts: dict[tuple[str, str | None, str, str | None, str | None], int] = {}
    for (vector, node, severity, job_id), count in groups.items():
        owner = known.get(job_id, (None, None)) if job_id is not None else (None, None)
        name = vector_names.get(vector, str(int(vector)))
        group = (name, node, severity.name, owner[0], owner[1])
        counts[group] = counts.get(group, 0) + count
    ordered = sorted(
        counts.items(),
        key=lambda item: (
            item[0][0],
            item[0][1] is None,
            item[0][1] or "",
            item[0][2],
            item[0][3] is None,
            item[0][3] or "",
            item[0][4] is None,
            item[0][4] or "",
        ),
    )
    rows: list[dict[str, object]] = [
        {"vector": v, "node": n, "severity": s, "user": u, "account": a, "open": count}
        for (v, n, s, u, a), count in ordered
    ]
    index.keep_counted(version, known, rows)
    return rows
