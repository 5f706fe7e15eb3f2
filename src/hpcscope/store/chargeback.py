"""Reads for chargeback: the kept summaries of finished jobs that overlap a period, and their
GPU rows. Scoped in SQL by the principal's :class:`~hpcscope.model.access.JobScope` (a
researcher's own jobs, a team lead's accounts, an admin all), like every job read.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict, cast

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.gpu_time import charged_gpu_seconds_sql
from hpcscope.store.duck import Store

#: Columns of ``job_summaries`` chargeback reads.
SUMMARY_COLUMNS = (
    "job_id",
    "user",
    "account",
    "partition",
    "exit_cause",
    "start_time",
    "end_time",
    "gpus_allocated",
    "allocated_gpu_seconds",
    "observed_gpu_seconds",
    "useful_gpu_seconds",
)


def _where(
    scope: JobScope, start: datetime, end: datetime, account: str | None
) -> tuple[str, list[object]]:
    scoped, params = Store.scope_sql(scope, user_column='s."user"', account_column="s.account")
    # a job overlaps [start, end) when it began before the end and ended at or after the start;
    # a job with one known time is the instant of that time
    where = (
        f"{scoped} AND coalesce(s.start_time, s.end_time) < ? "
        "AND coalesce(s.end_time, s.start_time) >= ?"
    )
    params = [*params, end, start]
    if account is not None:
        where += " AND s.account = ?"
        params.append(account)
    return where, params


def summaries_overlapping(
    store: Store,
    scope: JobScope,
    *,
    start: datetime,
    end: datetime,
    account: str | None = None,
) -> pa.Table:
    """Kept summaries inside ``scope`` of jobs that overlap ``[start, end)`` (optionally of one
    account), ordered by job id."""
    where, params = _where(scope, start, end, account)
    columns = ", ".join(f's."{c}"' for c in SUMMARY_COLUMNS)
    return store.query(
        f"SELECT {columns} FROM job_summaries s WHERE {where} ORDER BY s.job_id", params
    )


def gpu_rows_overlapping(
    store: Store,
    scope: JobScope,
    *,
    start: datetime,
    end: datetime,
    account: str | None = None,
) -> pa.Table:
    """The kept GPU rows (``job_id``, ``node``, ``observed_seconds``, ``useful_seconds``,
    ``verdict``) of the jobs :func:`summaries_overlapping` returns."""
    where, params = _where(scope, start, end, account)
    return store.query(
        "SELECT g.job_id, g.node, g.observed_seconds, g.useful_seconds, g.verdict "
        f"FROM job_gpu_summaries g SEMI JOIN (SELECT s.job_id FROM job_summaries s WHERE {where}) "
        "j ON j.job_id = g.job_id ORDER BY g.job_id, g.node, g.gpu",
        params,
    )


class AccountSeconds(TypedDict):
    """Charged GPU-seconds of one account's finished jobs (``account`` None: no account)."""

    account: str | None
    allocated_gpu_seconds: float | None
    useful_gpu_seconds: float | None


def seconds_by_account(store: Store) -> list[AccountSeconds]:
    """Per account (null: no account), over every kept summary: ``allocated_gpu_seconds``
    and ``useful_gpu_seconds`` as chargeback charges them (allocated, else observed; useful
    capped at allocated: :func:`hpcscope.model.gpu_time.charged_gpu_seconds`). Unscoped:
    for ``/metrics``, which requires an admin."""
    allocated, useful = charged_gpu_seconds_sql(
        "allocated_gpu_seconds", "observed_gpu_seconds", "useful_gpu_seconds"
    )
    rows = store.query(
        f"SELECT account, sum({allocated}) AS allocated_gpu_seconds, "
        f"sum({useful}) AS useful_gpu_seconds FROM job_summaries GROUP BY account "
        "ORDER BY account NULLS LAST"
    ).to_pylist()
    return cast(list[AccountSeconds], rows)  # the query's columns
