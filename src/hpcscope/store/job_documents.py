"""Finished jobs' documents, stored once: a read of one is one keyed row, not a recomputation.

A finished job's answers no longer change once its summary is written (its samples are final),
except when retention drops what they were computed from. ``job_documents`` (migration 20)
keeps one row per job and ``kind`` (``timeseries``: the JSON of ``/api/jobs/{id}/timeseries``)
with its ETag and its body, zlib-compressed, and the earliest raw sample and rollup minute it
read: retention that drops raw samples (a store without a cold tier deletes them) or rollups
before those drops the document, and the upkeep computes it again from what is left.
What a site deletes by hand from the cold tier's Parquet files is not noticed. The bodies of
a kind written with ``remember`` are also held in memory (:func:`remembered_document`), kept by
the same writes that change the rows.
"""

from __future__ import annotations

import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb

from hpcscope.store.cold import cold_dir

if TYPE_CHECKING:
    from hpcscope.store.duck import Store

JOB_DOCUMENTS = "job_documents"

JOB_DOCUMENTS_DDL = f"""
CREATE TABLE {JOB_DOCUMENTS} (
    job_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    etag VARCHAR NOT NULL,
    body BLOB NOT NULL,
    raw_first_ts TIMESTAMP,
    rollup_first_ts TIMESTAMP,
    written_at TIMESTAMP NOT NULL,
    PRIMARY KEY (job_id, kind)
);
"""
"""Migration 20: one row per finished job and kind of document."""

#: zlib level of the bodies: JSON of ratios compresses ~3x at level 1, little more above it.
COMPRESSION_LEVEL = 1


@dataclass(frozen=True, slots=True)
class JobDocument:
    """One document of a job: its bytes as served, their ETag, and what retention may drop
    under it (the earliest raw sample and rollup minute it read; None: none)."""

    job_id: str
    etag: str
    body: bytes
    raw_first_ts: datetime | None = None
    rollup_first_ts: datetime | None = None


#: Bodies of the documents written with ``remember`` kept in memory, per store, up to this
#: many bytes (least recently used out first): a read of one is a lookup, no query
#: (:func:`remembered_document`). Kept by the writes themselves, on the writer thread, in the
#: order they commit: a write replaces a job's body, a forget drops the kind's.
MEMORY_BYTES = 32 << 20


class _Memory:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: OrderedDict[tuple[str, str], tuple[bytes, str]] = OrderedDict()
        self.bytes = 0

    def put(self, kind: str, documents: Sequence[JobDocument]) -> None:
        with self.lock:
            for d in documents:
                old = self.bodies.pop((kind, d.job_id), None)
                self.bytes += len(d.body) - (len(old[0]) if old is not None else 0)
                self.bodies[(kind, d.job_id)] = (d.body, d.etag)
            while self.bytes > MEMORY_BYTES and self.bodies:
                _, (body, _etag) = self.bodies.popitem(last=False)
                self.bytes -= len(body)

    def get(self, kind: str, job_id: str) -> tuple[bytes, str] | None:
        with self.lock:
            found = self.bodies.get((kind, job_id))
            if found is not None:
                self.bodies.move_to_end((kind, job_id))
            return found

    def _drop(self, keys: list[tuple[str, str]]) -> None:
        for key in keys:
            found = self.bodies.pop(key, None)
            if found is not None:
                self.bytes -= len(found[0])

    def forget(self, kind: str) -> None:
        with self.lock:
            self._drop([k for k in self.bodies if k[0] == kind])

    def forget_jobs(self, kind: str, job_ids: Sequence[str]) -> None:
        with self.lock:
            self._drop([(kind, job_id) for job_id in job_ids])

    def forget_prefixed(self, prefix: str, keep: str) -> None:
        with self.lock:
            self._drop([k for k in self.bodies if k[0].startswith(prefix) and k[0] != keep])


_MEMORY: weakref.WeakKeyDictionary[Store, _Memory] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


def _memory(store: Store) -> _Memory:
    with _MEMORY_LOCK:
        memory = _MEMORY.get(store)
        if memory is None:
            memory = _MEMORY[store] = _Memory()
        return memory


def remembered_document(store: Store, job_id: str, kind: str) -> tuple[bytes, str] | None:
    """The body and ETag of ``job_id``'s document of ``kind`` if this process wrote it with
    ``remember`` and still holds it (:data:`MEMORY_BYTES`), else None: never a query."""
    return _memory(store).get(kind, job_id)


def write_documents(
    store: Store,
    kind: str,
    documents: Sequence[JobDocument],
    *,
    now: datetime,
    remember: bool = False,
) -> Future[int]:
    """Store ``documents`` of ``kind`` (replacing a job's earlier one); returns rows written.
    ``remember``: keep their bodies in memory too (:func:`remembered_document`)."""
    rows = [
        (
            d.job_id,
            kind,
            d.etag,
            zlib.compress(d.body, COMPRESSION_LEVEL),
            d.raw_first_ts,
            d.rollup_first_ts,
            now,
        )
        for d in documents
    ]

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if rows:
            con.executemany(
                f"INSERT OR REPLACE INTO {JOB_DOCUMENTS} VALUES (?, ?, ?, ?, ?, ?, ?)", rows
            )
            if remember:
                _memory(store).put(kind, documents)
            else:
                _memory(store).forget_jobs(kind, [d.job_id for d in documents])
        return len(rows)

    return store.submit_write(write)


def read_document(store: Store, job_id: str, kind: str) -> tuple[bytes, str] | None:
    """The body and ETag of ``job_id``'s document of ``kind``, or None when none is stored."""
    remembered = _memory(store).get(kind, job_id)
    if remembered is not None:
        return remembered
    row = store.query_row(
        f"SELECT body, etag FROM {JOB_DOCUMENTS} WHERE job_id = ? AND kind = ?", [job_id, kind]
    )
    return None if row is None else (zlib.decompress(row[0]), str(row[1]))


def jobs_without(store: Store, kind: str, *, limit: int) -> list[str]:
    """Summarised jobs that have no document of ``kind``, the latest ended first."""
    rows = store.query(
        f"SELECT s.job_id FROM job_summaries s ANTI JOIN "
        f"(SELECT job_id FROM {JOB_DOCUMENTS} WHERE kind = ?) d ON d.job_id = s.job_id "
        f"ORDER BY s.end_time DESC NULLS LAST, s.job_id DESC LIMIT {int(limit)}",
        [kind],
    )
    return [str(v) for v in rows.column("job_id").to_pylist()]


def forget_read_before(
    store: Store, kind: str, *, raw_before: datetime | None, rollups_before: datetime | None
) -> Future[int]:
    """Drop the documents of ``kind`` that read raw samples before ``raw_before`` or rollup
    minutes before ``rollups_before`` (what retention has just deleted); returns rows dropped."""

    if cold_dir(store.path) is not None:
        raw_before = None  # the cold tier keeps them: moved, not deleted

    def write(con: duckdb.DuckDBPyConnection) -> int:
        rows = con.execute(
            f"DELETE FROM {JOB_DOCUMENTS} WHERE kind = ? AND "
            "(raw_first_ts < ? OR rollup_first_ts < ?)",
            [kind, raw_before, rollups_before],
        ).fetchall()
        dropped = int(rows[0][0]) if rows else 0
        if dropped:
            _memory(store).forget(kind)
        return dropped

    return store.submit_write(write)


def forget_other_kinds(store: Store, prefix: str, keep: str) -> Future[int]:
    """Drop the documents whose kind starts with ``prefix`` but is not ``keep`` (the other
    versions of a versioned kind, never read again); returns rows dropped."""

    def write(con: duckdb.DuckDBPyConnection) -> int:
        rows = con.execute(
            f"DELETE FROM {JOB_DOCUMENTS} WHERE starts_with(kind, ?) AND kind <> ?",
            [prefix, keep],
        ).fetchall()
        _memory(store).forget_prefixed(prefix, keep)
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)
