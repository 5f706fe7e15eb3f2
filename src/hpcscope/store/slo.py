"""What the SLOs read: Slurm's job records with their kept summary's cause and GPU-seconds.

One query over ``jobs`` (migration 1, Slurm's submit/start/end, partition, QOS, state, exit
code) left-joined to ``job_summaries`` (migration 7: the exit cause with the Xid split, useful,
allocated and observed GPU-seconds). No table of its own: every SLO figure is recomputed from these
records, so it always agrees with them (``docs/slo.md``).
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.store.duck import Store

_COLUMNS = (
    'j.job_id, j."user", j.account, j.partition, j.qos, j.state, j.exit_code, j.submit_time, '
    "j.start_time, j.end_time, s.exit_cause AS summary_exit_cause, s.useful_gpu_seconds, "
    "s.allocated_gpu_seconds, s.observed_gpu_seconds"
)


def slo_job_records(store: Store, scope: JobScope, *, since: datetime | None) -> pa.Table:
    """Job records inside ``scope`` that may hold an SLO event after ``since`` (all with None).

    A job may: when it has not started (its queue wait is still running), started after
    ``since``, or has not ended or ended after it. Sorted by job id.

    Returns:
        ``job_id``, ``user``, ``account``, ``partition``, ``qos``, ``state``, ``exit_code``,
        ``submit_time``, ``start_time``, ``end_time`` (from ``jobs``), ``summary_exit_cause``,
        ``useful_gpu_seconds``, ``allocated_gpu_seconds``, ``observed_gpu_seconds`` (from
        ``job_summaries``, null without one).
    """
    where, params = Store.scope_sql(scope, user_column='j."user"', account_column="j.account")
    window = ""
    if since is not None:
        window = (
            " AND (j.start_time IS NULL OR j.start_time > ? OR j.end_time IS NULL "
            "OR j.end_time > ?)"
        )
        params = [*params, since, since]
    return store.query(
        f"SELECT {_COLUMNS} FROM jobs j LEFT JOIN job_summaries s ON s.job_id = j.job_id "
        f"WHERE {where}{window} ORDER BY j.job_id",
        params,
    )
