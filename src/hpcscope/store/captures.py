"""Stored trace captures (``trace_captures``, migration 12): upsert a window, read a job's.

Reads take a job id the caller has already checked the principal may see (the job page and
``hpcscope job`` ask :meth:`Service.job_report` first, which applies the principal's scope).
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import duckdb

from hpcscope.model.capture import StoredCapture
from hpcscope.store.duck import Store

_NAMES = tuple(f.name for f in fields(StoredCapture))
_COLUMNS = ", ".join(_NAMES)


# A DuckDB row as pyarrow gives it (the SELECT's columns), typed here.
def _row(values: dict[str, Any]) -> StoredCapture:
    data = dict(values)
    data["nodes"] = tuple(data["nodes"] or ())
    data["notes"] = tuple(data["notes"] or ())
    return StoredCapture(**data)


def upsert_capture(store: Store, row: StoredCapture) -> None:
    """Insert or replace the row of (job, window) (waits for the writer). A window analysed
    again (more ranks arrived) replaces the earlier row, and a window first kept under the
    claimed job moves once the platform places it."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "DELETE FROM trace_captures WHERE capture_window = ? AND "
            "(job_id = ? OR claimed_job_id = ?)",
            [row.capture_window, row.job_id, row.claimed_job_id],
        )
        values = [getattr(row, name) for name in _NAMES]
        values[_NAMES.index("nodes")] = list(row.nodes)
        values[_NAMES.index("notes")] = list(row.notes)
        con.execute(
            f"INSERT INTO trace_captures ({_COLUMNS}) VALUES ({', '.join('?' for _ in _NAMES)})",
            values,
        )

    store.submit_write(write).result()


def job_captures(store: Store, job_id: str, *, limit: int = 50) -> list[StoredCapture]:
    """The job's analysed windows, newest first (with their documents)."""
    table = store.query(
        f"SELECT {_COLUMNS} FROM trace_captures WHERE job_id = ? "
        f"ORDER BY capture_window DESC LIMIT {int(limit)}",
        [job_id],
    )
    return [_row(values) for values in table.to_pylist()]


def captured_job_ids(store: Store) -> frozenset[str]:
    """The jobs that have at least one stored capture window."""
    table = store.query("SELECT DISTINCT job_id FROM trace_captures")
    return frozenset(str(v) for v in table.column("job_id").to_pylist())


def sampled_job(
    store: Store, node: str, gpu: int | None, at: datetime, *, margin_seconds: float = 60.0
) -> str | None:
    """The job the stored GPU samples of ``node`` (and ``gpu``) were attributed to around
    ``at`` (the collector's attribution from the platform's allocations and the hpc_job
    mapping), the most frequent one; None when no sample there names a job."""
    margin = timedelta(seconds=margin_seconds)
    clauses = ["node = ?", "ts BETWEEN ? AND ?", "job_id IS NOT NULL"]
    params: list[object] = [node, at - margin, at + margin]
    if gpu is not None:
        clauses.append("gpu = ?")
        params.append(gpu)
    rows = store.query(
        f"SELECT job_id, count(*) AS n FROM gpu_samples WHERE {' AND '.join(clauses)} "
        "GROUP BY job_id ORDER BY n DESC, job_id LIMIT 1",
        params,
    ).to_pylist()
    return str(rows[0]["job_id"]) if rows else None
