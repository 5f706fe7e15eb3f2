"""Who read my weights: the jobs, users and processes that touched a protected path.

For a checkpoint directory, a weight file or a dataset root, :func:`who_accessed` lists every
access record the principal may see (``store/file_access.py``: accesses by their own jobs, and
accesses by anyone to paths their jobs created; everything for a principal who
:attr:`~hpcscope.model.access.Principal.sees_all_access_records`), newest first, and one line
per accessor (job, user, node, process) with the bytes it read, wrote and mapped and when.
Sources: whichever the site runs (Tetragon's crown-jewel policy, ``hpcscope sensor``, Falco's
file rules), recorded by the alert engine as events arrive.

G6 redaction: a researcher or team lead seeing another user's job through path ownership sees
that job, user and binary, not its command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict, cast

from hpcscope.model.access import Principal
from hpcscope.model.errors import InputError
from hpcscope.model.timeutil import iso_z
from hpcscope.service.contract import Contract, UtcText
from hpcscope.store import Store
from hpcscope.store.file_access import file_access

REDACTED = "(redacted: another user's job)"


class AccessPathError(InputError, ValueError):
    """A path that cannot be looked up (not absolute)."""


class AccessRecordDocument(Contract):
    """One access to a protected path.

    ``bytes``: bytes read or written (``read``/``write``; per second and at close from the
    sensor), the mapped length in bytes (``mmap``), null where the source does not observe it.
    """

    ts: UtcText
    path: str
    access: str
    bytes: int | None
    node: str | None
    job_id: str | None
    user: str | None
    account: str | None
    pid: int | None
    uid: int | None
    binary: str | None
    arguments: str | None
    arguments_redacted: bool
    owner_job_id: str | None
    owner_user: str | None
    source_kind: str
    source: str
    position: str


class AccessorDocument(Contract):
    """One accessor (job, user, node, process) of the path, with its totals.

    ``read_bytes``/``written_bytes``: sum of observed bytes (a lower bound when a source does
    not report sizes); ``mapped_bytes``: sum of mmap lengths; ``events``: access records.
    """

    job_id: str | None
    user: str | None
    account: str | None
    node: str | None
    pid: int | None
    binary: str | None
    accesses: list[str]
    read_bytes: int
    written_bytes: int
    mapped_bytes: int
    events: int
    first_seen: UtcText
    last_seen: UtcText
    paths: int


class AccessReport(Contract):
    """Who opened, read, mapped or wrote a protected path (``GET /api/access``,
    ``hpcscope access PATH --json``)."""

    path: str
    sees_all: bool
    accessors: list[AccessorDocument]
    records: list[AccessRecordDocument]
    truncated: bool


class _AccessRow(TypedDict):
    """One row of :func:`~hpcscope.store.file_access.file_access`."""

    ts: datetime
    path: str
    access: str
    bytes: int | None
    node: str | None
    job_id: str | None
    user: str | None
    account: str | None
    pid: int | None
    uid: int | None
    binary: str | None
    arguments: str | None
    owner_job_id: str | None
    owner_user: str | None
    source_kind: str
    source_name: str
    source_line: int
    own_job: bool


@dataclass
class _Accessor:
    """One accessor's accesses, summed (its first row names it)."""

    row: _AccessRow
    first: datetime
    last: datetime
    accesses: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    read: int = 0
    written: int = 0
    mapped: int = 0
    events: int = 0


def _record(row: _AccessRow, *, redact: bool) -> AccessRecordDocument:
    return AccessRecordDocument(
        ts=iso_z(row["ts"]),
        path=row["path"],
        access=row["access"],
        bytes=row["bytes"],
        node=row["node"],
        job_id=row["job_id"],
        user=row["user"],
        account=row["account"],
        pid=row["pid"],
        uid=row["uid"],
        binary=row["binary"],
        arguments=REDACTED if redact and row["arguments"] else row["arguments"],
        arguments_redacted=redact and bool(row["arguments"]),
        owner_job_id=row["owner_job_id"],
        owner_user=row["owner_user"],
        source_kind=row["source_kind"],
        source=row["source_name"],
        position=f"line {row['source_line']}",
    )


def _accessors(rows: list[_AccessRow]) -> list[AccessorDocument]:
    groups: dict[tuple[str | None, str | None, int | None, str | None, str | None], _Accessor] = {}
    for row in rows:
        key = (row["job_id"], row["node"], row["pid"], row["binary"], row["user"])
        group = groups.setdefault(key, _Accessor(row, row["ts"], row["ts"]))
        size = row["bytes"] or 0
        access = row["access"]
        group.accesses.add(access)
        group.read += size if access == "read" else 0
        group.written += size if access == "write" else 0
        group.mapped += size if access == "mmap" else 0
        group.events += 1
        group.first = min(group.first, row["ts"])
        group.last = max(group.last, row["ts"])
        group.paths.add(row["path"])
    order = ("open", "read", "mmap", "write", "truncate")
    found = [
        AccessorDocument(
            job_id=g.row["job_id"],
            user=g.row["user"],
            account=g.row["account"],
            node=g.row["node"],
            pid=g.row["pid"],
            binary=g.row["binary"],
            accesses=[a for a in order if a in g.accesses],
            read_bytes=g.read,
            written_bytes=g.written,
            mapped_bytes=g.mapped,
            events=g.events,
            first_seen=iso_z(g.first),
            last_seen=iso_z(g.last),
            paths=len(g.paths),
        )
        for g in groups.values()
    ]
    found.sort(key=lambda a: (a.last_seen, a.job_id or ""), reverse=True)
    return found


def who_accessed(
    store: Store,
    principal: Principal,
    path: str,
    *,
    since: datetime | None = None,
    limit: int = 5000,
) -> AccessReport:
    """The access records of ``path`` (and below) ``principal`` may see, and their accessors.

    Args:
        path: an absolute path (a file or a directory).
        since: only records at or after this time (naive UTC).
        limit: at most this many records (``truncated`` says when more exist).

    Raises:
        AccessPathError: ``path`` is not absolute.
    """
    if not path.startswith("/"):
        raise AccessPathError(f"path {path!r} is not absolute")
    sees_all = principal.sees_all_access_records
    table = file_access(
        store, principal.access_record_scope(), path=path, since=since, limit=limit + 1
    )
    rows = cast(list[_AccessRow], table.to_pylist())
    truncated = len(rows) > limit
    rows = rows[:limit]
    records = [_record(r, redact=not sees_all and not r["own_job"]) for r in rows]
    return AccessReport(
        path=path,
        sees_all=sees_all,
        accessors=_accessors(rows),
        records=records,
        truncated=truncated,
    )
