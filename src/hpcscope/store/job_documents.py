"""Finished jobs' documents, stored once: a read of one is one keyed row, not a recomputation.

A finished job's answers no longer change once its summary is written (its samples are final),
except when retention drops what they were computed from. ``job_documents`` (migration 20)
keeps one row per job and ``kind`` (``timeseries``: the JSON of ``/api/jobs/{id}/timeseries``)
with its ETag and its body, zlib-compressed, and the earliest raw sample and rollup minute it
read: retention that drops raw samples (a store without a cold tier deletes them) or rollups
before those drops the document, and the upkeep computes it again from what is left.
What a site deletes by hand from the cold tier's Parquet files is not noticed.
"""

from __future__ import annotations

import zlib
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


def write_documents(
    store: Store, kind: str, documents: Sequence[JobDocument], *, now: datetime
) -> Future[int]:
    """Store ``documents`` of ``kind`` (replacing a job's earlier one); returns rows written."""
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
        return len(rows)

    return store.submit_write(write)


def read_document(store: Store, job_id: str, kind: str) -> tuple[bytes, str] | None:
    """The body and ETag of ``job_id``'s document of ``kind``, or None when none is stored."""
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
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)


def forget_other_kinds(store: Store, prefix: str, keep: str) -> Future[int]:
    """Drop the documents whose kind starts with ``prefix`` but is not ``keep`` (the other
    versions of a versioned kind, never read again); returns rows dropped."""

    def write(con: duckdb.DuckDBPyConnection) -> int:
        rows = con.execute(
            f"DELETE FROM {JOB_DOCUMENTS} WHERE starts_with(kind, ?) AND kind <> ?",
            [prefix, keep],
        ).fetchall()
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)
