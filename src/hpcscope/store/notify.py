"""Notifications: the audit log, per-user preferences (opt-out) and warn-then-cancel state
(``notify_audit``, ``notify_preferences``, ``notify_cancels``: migration 11).

Every notification hpcscope sends or withholds (e-mail, webhook, Alertmanager) and every action
it takes (a warning before a cancel, the ``scancel`` itself) is one ``notify_audit`` row: when,
what (``kind``: notification or action), which rule and job, whose job, the channel, the
recipient, the outcome (``sent``, ``failed``, ``opted_out``, ``rate_limited``, ``warned``,
``cancelled``, ``cleared``, ``cancel_failed``) and a detail line. The log is append-only and
admin-only (``serve/routes/notify.py``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime

import duckdb
import orjson

from hpcscope.store.duck import Store


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited notification or action (module docstring)."""

    at: datetime
    kind: str
    rule_id: str
    job_id: str | None
    user: str | None
    account: str | None
    channel: str
    recipient: str | None
    outcome: str
    detail: str
    audit_id: str = ""

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


_AUDIT_COLUMNS = (
    "audit_id", "at", "kind", "rule_id", "job_id", "user", "account", "channel", "recipient",
    "outcome", "detail",
)  # fmt: skip


def record_audit(store: Store, entries: Sequence[AuditEntry]) -> Future[int]:
    """Append audit rows (ids are assigned here when empty: the write time in ns, then random
    hex, so that rows of the same ``at`` read back newest written first)."""
    rows = [
        (
            entry.audit_id or f"{time.time_ns():016x}{secrets.token_hex(4)}",
            entry.at,
            entry.kind,
            entry.rule_id,
            entry.job_id,
            entry.user,
            entry.account,
            entry.channel,
            entry.recipient,
            entry.outcome,
            entry.detail,
        )
        for entry in entries
    ]
    names = ", ".join(f'"{c}"' for c in _AUDIT_COLUMNS)
    marks = ", ".join("?" for _ in _AUDIT_COLUMNS)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if rows:
            con.executemany(f"INSERT INTO notify_audit ({names}) VALUES ({marks})", rows)
        return len(rows)

    return store.submit_write(write)


def audit_log(
    store: Store,
    *,
    job_id: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    limit: int = 500,
) -> list[AuditEntry]:
    """Audit rows, newest first (unscoped: callers check the principal is an admin)."""
    clauses: list[str] = []
    params: list[object] = []
    for column, value in (("job_id", job_id), ("kind", kind)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if since is not None:
        clauses.append('"at" >= ?')
        params.append(since)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    table = store.query(
        f'SELECT * FROM notify_audit {where} ORDER BY "at" DESC, audit_id DESC LIMIT {int(limit)}',
        params,
    )
    return [AuditEntry(**row) for row in table.to_pylist()]


def last_outcomes(
    store: Store, *, rule_id: str, job_id: str | None, channel: str
) -> list[tuple[datetime, str]]:
    """(time, outcome) of the audited notifications of one rule, job and channel, newest
    first: the deduplication and rate limit read them."""
    table = store.query(
        'SELECT "at", outcome FROM notify_audit'
        " WHERE rule_id = ? AND job_id IS NOT DISTINCT "
        'FROM ? AND channel = ? ORDER BY "at" DESC LIMIT 50',
        [rule_id, job_id, channel],
    )
    return [(row["at"], row["outcome"]) for row in table.to_pylist()]


def sent_since(store: Store, *, user: str, channel: str, since: datetime) -> int:
    """How many notifications were sent to ``user`` on ``channel`` since ``since``."""
    table = store.query(
        'SELECT count(*) AS n FROM notify_audit WHERE "user" = ? AND channel = ? '
        "AND kind = 'notification' AND outcome = 'sent' AND \"at\" >= ?",
        [user, channel, since],
    )
    return int(table.to_pylist()[0]["n"])


@dataclass(frozen=True, slots=True)
class Preferences:
    """One user's notification choices (the default: everything on, nothing muted)."""

    user: str
    email_enabled: bool = True
    webhook_enabled: bool = True
    muted_rules: tuple[str, ...] = ()
    updated_at: datetime | None = None
    updated_by: str | None = None

    def allows(self, *, channel: str, rule_id: str) -> bool:
        """Whether a notification of ``rule_id`` on ``channel`` may reach this user."""
        if rule_id in self.muted_rules:
            return False
        if channel == "email":
            return self.email_enabled
        if channel == "webhook":
            return self.webhook_enabled
        return True


def preferences(store: Store, user: str) -> Preferences:
    """``user``'s stored preferences, or the defaults."""
    rows = store.query('SELECT * FROM notify_preferences WHERE "user" = ?', [user]).to_pylist()
    if not rows:
        return Preferences(user=user)
    row = rows[0]
    return Preferences(
        user=row["user"],
        email_enabled=bool(row["email_enabled"]),
        webhook_enabled=bool(row["webhook_enabled"]),
        muted_rules=tuple(orjson.loads(row["muted_rules_json"])),
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


def set_preferences(store: Store, prefs: Preferences, *, by: str, at: datetime) -> Future[None]:
    """Store ``prefs`` (replacing the user's previous ones), recording who and when."""
    muted = orjson.dumps(sorted(set(prefs.muted_rules))).decode()

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            'INSERT OR REPLACE INTO notify_preferences ("user", email_enabled, webhook_enabled, '
            "muted_rules_json, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?)",
            [prefs.user, prefs.email_enabled, prefs.webhook_enabled, muted, at, by],
        )

    return store.submit_write(write)


def cancel_records(store: Store, job_ids: Sequence[str]) -> dict[str, dict[str, object]]:
    """The stored warn-then-cancel rows of ``job_ids``, by job."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    table = store.query(f"SELECT * FROM notify_cancels WHERE job_id IN ({marks})", wanted)
    return {str(row["job_id"]): row for row in table.to_pylist()}


def warned_job_ids(store: Store) -> list[str]:
    """Jobs in the ``warned`` phase (re-checked every cycle until cancelled or cleared)."""
    table = store.query("SELECT job_id FROM notify_cancels WHERE phase = 'warned'")
    return [str(j) for j in table.column("job_id").to_pylist()]


def put_cancel_record(
    store: Store,
    *,
    job_id: str,
    rule_id: str,
    phase: str,
    warned_at: datetime,
    decided_at: datetime | None,
) -> Future[None]:
    """Insert or replace one job's warn-then-cancel row."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "INSERT OR REPLACE INTO notify_cancels (job_id, rule_id, phase, warned_at, "
            "decided_at) VALUES (?, ?, ?, ?, ?)",
            [job_id, rule_id, phase, warned_at, decided_at],
        )

    return store.submit_write(write)


def job_records(store: Store, job_ids: Sequence[str]) -> list[dict[str, object]]:
    """The scheduler's records of ``job_ids``: ``job_id``, ``user``, ``account``,
    ``partition``, ``state``, ``start_time``, ``end_time``, ``gpus``."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return []
    marks = ", ".join("?" for _ in wanted)
    table = store.query(
        'SELECT job_id, "user", account, partition, state, start_time, end_time, gpus '
        f"FROM jobs WHERE job_id IN ({marks}) ORDER BY job_id",
        wanted,
    )
    rows: list[dict[str, object]] = table.to_pylist()
    return rows


def running_job_ids(store: Store) -> list[str]:
    """Jobs the scheduler says are running."""
    table = store.query("SELECT job_id FROM jobs WHERE state LIKE 'RUNNING%' ORDER BY job_id")
    return [str(j) for j in table.column("job_id").to_pylist()]


def recently_ended_job_ids(store: Store, *, since: datetime) -> list[str]:
    """Jobs that ended since ``since`` (for ``failed_with_xid``)."""
    table = store.query(
        "SELECT job_id FROM jobs WHERE end_time >= ? AND state NOT LIKE 'RUNNING%' ORDER BY job_id",
        [since],
    )
    return [str(j) for j in table.column("job_id").to_pylist()]
