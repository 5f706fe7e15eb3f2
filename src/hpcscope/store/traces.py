"""Stored trace analyses, and the telemetry a straggler's evidence needs.

Every read of analyses takes a :class:`JobScope` and applies it in SQL: an analysis is visible
to its owner, to admins (``all_jobs``), and to team leads who coordinate the account of the job
it is linked to or an account its owner belonged to when it was made. Nothing filters later.
"""

from __future__ import annotations

from typing import Any

import duckdb

from hpcscope.model.access import JobScope
from hpcscope.model.trace_analysis import StoredAnalysis
from hpcscope.store.duck import Store

_COLUMNS = (
    "analysis_id, owner_user, owner_accounts, job_id, account, created, source_names, ranks, "
    "steps, partial, slowdown, straggler_ranks, window_start, window_end"
)


def _visible(scope: JobScope) -> tuple[str, list[object]]:
    if scope.all_jobs:
        return "TRUE", []
    clauses: list[str] = []
    params: list[object] = []
    if scope.users:
        clauses.append(f"owner_user IN ({', '.join('?' for _ in scope.users)})")
        params.extend(sorted(scope.users))
    if scope.accounts:
        accounts = sorted(scope.accounts)
        clauses.append(f"account IN ({', '.join('?' for _ in accounts)})")
        params.extend(accounts)
        clauses.append("list_has_any(owner_accounts, ?::VARCHAR[])")
        params.append(accounts)
    return ("(" + " OR ".join(clauses) + ")" if clauses else "FALSE"), params


# A DuckDB row as pyarrow gives it (the SELECT's columns), typed here.
def _row(values: dict[str, Any], result_json: str = "") -> StoredAnalysis:
    return StoredAnalysis(
        analysis_id=values["analysis_id"],
        owner_user=values["owner_user"],
        owner_accounts=tuple(values["owner_accounts"] or ()),
        job_id=values["job_id"],
        account=values["account"],
        created=values["created"],
        source_names=tuple(values["source_names"] or ()),
        ranks=int(values["ranks"]),
        steps=int(values["steps"]),
        partial=bool(values["partial"]),
        slowdown=values["slowdown"],
        straggler_ranks=tuple(int(r) for r in values["straggler_ranks"] or ()),
        window_start=values["window_start"],
        window_end=values["window_end"],
        result_json=values.get("result_json") or result_json,
    )


def insert_analysis(store: Store, row: StoredAnalysis) -> None:
    """Store one analysis (waits for the writer)."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            f"INSERT INTO trace_analyses ({_COLUMNS}, result_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                row.analysis_id,
                row.owner_user,
                list(row.owner_accounts),
                row.job_id,
                row.account,
                row.created,
                list(row.source_names),
                row.ranks,
                row.steps,
                row.partial,
                row.slowdown,
                list(row.straggler_ranks),
                row.window_start,
                row.window_end,
                row.result_json,
            ],
        )

    store.submit_write(write).result()


def visible_analyses(store: Store, scope: JobScope, *, limit: int = 200) -> list[StoredAnalysis]:
    """Analyses ``scope`` admits, newest first, without their JSON documents."""
    where, params = _visible(scope)
    table = store.query(
        f"SELECT {_COLUMNS} FROM trace_analyses WHERE {where} "
        f"ORDER BY created DESC, analysis_id LIMIT {int(limit)}",
        params,
    )
    return [_row(values) for values in table.to_pylist()]


def get_analysis(store: Store, analysis_id: str, scope: JobScope) -> StoredAnalysis | None:
    """One analysis with its JSON document, or None when absent *or* not visible."""
    where, params = _visible(scope)
    table = store.query(
        f"SELECT {_COLUMNS}, result_json FROM trace_analyses WHERE analysis_id = ? AND {where}",
        [analysis_id, *params],
    )
    rows = table.to_pylist()
    return _row(rows[0]) if rows else None


def link_job(store: Store, analysis_id: str, *, job_id: str | None, account: str | None) -> int:
    """Set (or clear, with None) the job an analysis is linked to; the caller has checked
    that the principal may see both. Returns the number of rows changed."""

    def write(con: duckdb.DuckDBPyConnection) -> int:
        con.execute(
            "UPDATE trace_analyses SET job_id = ?, account = ? WHERE analysis_id = ?",
            [job_id, account, analysis_id],
        )
        changed = con.execute(
            "SELECT count(*) FROM trace_analyses WHERE analysis_id = ? "
            "AND job_id IS NOT DISTINCT FROM ?",
            [analysis_id, job_id],
        ).fetchone()
        return int(changed[0]) if changed else 0

    return store.submit_write(write).result()


def delete_analysis(store: Store, analysis_id: str) -> None:
    """Remove an analysis (the caller has checked the principal owns it or is an admin)."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("DELETE FROM trace_analyses WHERE analysis_id = ?", [analysis_id])

    store.submit_write(write).result()


def job_allocation(store: Store, job_id: str) -> list[tuple[str, int]]:
    """The ``(node, gpu)`` pairs a job's allocations name (the scheduler's and the job
    mapping's records; the GPUs its samples name are read from the metrics backend)."""
    rows = store.query(
        "SELECT DISTINCT node, gpu FROM job_allocations WHERE job_id = ? ORDER BY node, gpu",
        [job_id],
    ).to_pylist()
    return [(str(r["node"]), int(r["gpu"])) for r in rows]


def account_memberships(store: Store, user: str) -> list[str]:
    """Accounts ``user`` belongs to according to Slurm associations."""
    rows = store.query(
        'SELECT account FROM account_memberships WHERE "user" = ? ORDER BY account', [user]
    ).to_pylist()
    return [str(r["account"]) for r in rows]
