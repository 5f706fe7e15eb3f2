"""Finished jobs' page parts in ``job_documents`` (migration 20): what only they need.

A job's page parts are stored under a kind that names their version (``job_view:`` and a
fingerprint of the templates and settings they were rendered with,
``hpcscope.service.jobs.views``): after an upgrade or a change of those, the rows of the other
versions are never read again, and :func:`forget_other_kinds` drops them.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

import duckdb

from hpcscope.store.job_documents import JOB_DOCUMENTS

if TYPE_CHECKING:
    from hpcscope.store.duck import Store


def forget_other_kinds(store: Store, prefix: str, keep: str) -> Future[int]:
    """Drop the documents whose kind starts with ``prefix`` but is not ``keep``; returns rows
    dropped."""

    def write(con: duckdb.DuckDBPyConnection) -> int:
        rows = con.execute(
            f"DELETE FROM {JOB_DOCUMENTS} WHERE starts_with(kind, ?) AND kind <> ?",
            [prefix, keep],
        ).fetchall()
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)
