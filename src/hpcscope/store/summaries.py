"""Kept job summaries and the retention of raw samples.

A finished job's summary is written **once** (``job_summaries`` and ``job_gpu_summaries``,
migration 7): the service computes it from the raw samples with the same analysis functions as
the live report and hands it here. Summaries are kept forever; raw samples of a summarised job
may then be dropped by the retention pass (:func:`delete_raw_samples`), and its report is read
back from the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

import duckdb
import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.store import rollups
from hpcscope.store.cold import cold_dir, move_to_cold
from hpcscope.store.duck import Store
from hpcscope.store.migrations import ROLLUP_STATE
from hpcscope.store.readings import READINGS, SHARED_JOB_IDS, raw_table
from hpcscope.store.time_ranges import job_time_ranges

#: Scheduler states of a job that will not run again (Slurm's terminal states).
FINISHED_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
)


def jobs_to_summarise(store: Store, *, ended_before: datetime, limit: int = 500) -> pa.Table:
    """Scheduler records of finished jobs that ended before ``ended_before`` and have no
    summary yet (oldest first). ``ended_before`` leaves time for the last samples to land."""
    marks = ", ".join("?" for _ in FINISHED_STATES)
    return store.query(
        "SELECT j.* FROM jobs j ANTI JOIN job_summaries s ON s.job_id = j.job_id "
        f"WHERE j.end_time IS NOT NULL AND j.end_time < ? AND j.state IN ({marks}) "
        f"ORDER BY j.end_time, j.job_id LIMIT {int(limit)}",
        [ended_before, *FINISHED_STATES],
    )


def write_summaries(store: Store, jobs: pa.Table, gpus: pa.Table) -> Future[int]:
    """Write the summaries of ``jobs`` (and their GPU rows) once: a job already summarised is
    left as it is, with its GPU rows. Returns the number of jobs written.

    Args:
        jobs: ``JOB_SUMMARY_SCHEMA`` rows.
        gpus: ``JOB_GPU_SUMMARY_SCHEMA`` rows of the same jobs.
    """
    new_jobs = jobs.select(JOB_SUMMARY_SCHEMA.names).cast(JOB_SUMMARY_SCHEMA)
    new_gpus = gpus.select(JOB_GPU_SUMMARY_SCHEMA.names).cast(JOB_GPU_SUMMARY_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if new_jobs.num_rows == 0:
            return 0
        incoming_summaries = new_jobs  # noqa: F841  (DuckDB replacement scan)
        incoming_gpu_summaries = new_gpus  # noqa: F841
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _new_summaries AS SELECT i.* FROM incoming_summaries i "
            "ANTI JOIN job_summaries s ON s.job_id = i.job_id"
        )
        written = con.execute("SELECT count(*) FROM _new_summaries").fetchall()[0][0]
        con.execute("INSERT INTO job_summaries BY NAME SELECT * FROM _new_summaries")
        con.execute(
            "INSERT INTO job_gpu_summaries BY NAME SELECT g.* FROM incoming_gpu_summaries g "
            "SEMI JOIN _new_summaries n ON n.job_id = g.job_id"
        )
        con.execute("DROP TABLE _new_summaries")
        return int(written)

    return store.submit_write(write)


def summarised_job_ids(store: Store, job_ids: Sequence[str]) -> set[str]:
    """Those of ``job_ids`` that have a kept summary."""
    if not job_ids:
        return set()
    marks = ", ".join("?" for _ in job_ids)
    rows = store.query(f"SELECT job_id FROM job_summaries WHERE job_id IN ({marks})", list(job_ids))
    return {str(v) for v in rows.column("job_id").to_pylist()}


def gpu_summaries_for_jobs(store: Store, job_ids: Sequence[str]) -> pa.Table:
    """The kept per-GPU rows of ``job_ids`` (the caller has already checked visibility)."""
    if not job_ids:
        return store.query("SELECT * FROM job_gpu_summaries WHERE FALSE")
    marks = ", ".join("?" for _ in job_ids)
    return store.query(f"SELECT * FROM job_gpu_summaries WHERE job_id IN ({marks})", list(job_ids))


def job_summaries(store: Store, scope: JobScope, *, limit: int = 1000) -> pa.Table:
    """Kept job summaries that ``scope`` admits, newest end first."""
    where, params = Store.scope_sql(scope, user_column='s."user"', account_column="s.account")
    return store.query(
        f"SELECT * FROM job_summaries s WHERE {where} "
        f"ORDER BY s.end_time DESC NULLS LAST, s.job_id DESC LIMIT {int(limit)}",
        params,
    )


def summary_time_range(store: Store, job_id: str) -> tuple[datetime | None, datetime | None]:
    """First and last sample time of a summarised job (None, None when not summarised)."""
    rows = store.query(
        "SELECT first_sample_ts AS first, last_sample_ts AS last FROM job_summaries "
        "WHERE job_id = ?",
        [job_id],
    ).to_pylist()
    return (rows[0]["first"], rows[0]["last"]) if rows else (None, None)


def summary_time_ranges(
    store: Store, job_ids: Sequence[str]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """:func:`summary_time_range` of each of ``job_ids``, in one query."""
    return job_time_ranges(
        store,
        "SELECT job_id, first_sample_ts AS first, last_sample_ts AS last FROM job_summaries",
        job_ids,
        grouped=False,
    )


def delete_raw_samples(
    store: Store, *, before: datetime, now: datetime | None = None
) -> Future[int]:
    """Move raw samples older than ``before`` of summarised jobs only, and only in minutes
    whose rollups are final, to the cold tier (``store/cold.py``: Parquet beside the store; a
    store in memory deletes them). Samples without a job, or of a job without a summary, stay.
    Returns the number of rows taken out of the table."""
    directory = cold_dir(store.path)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        samples = raw_table(con)
        # a shared GPU's reading goes only when every one of its jobs is summarised
        shared = (
            f"AND ({SHARED_JOB_IDS} IS NULL OR list_has_all("
            f"(SELECT list(job_id) FROM job_summaries), {SHARED_JOB_IDS}))"
            if samples == READINGS
            else ""
        )
        # minutes not yet final keep their raw samples, and so do those not yet rolled up
        pending = (
            f", coalesce((SELECT max(pending_from) FROM {ROLLUP_STATE}), ?)"
            if rollups.has_pending(con)
            else ""
        )
        where = (
            f"ts < least(?, coalesce("
            f"(SELECT min(minute) FROM {rollups.rollup_table(con)} WHERE NOT final), ?)"
            f"{pending}) AND job_id IN (SELECT job_id FROM job_summaries) {shared}"
        )
        params = [before, before, before] if pending else [before, before]
        if directory is not None and samples == READINGS:
            return move_to_cold(
                con, samples, where=where, params=params, directory=directory, now=now or before
            )
        rows = con.execute(f"DELETE FROM {samples} WHERE {where}", params).fetchall()
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)


def delete_final_rollups(store: Store, *, before: datetime) -> Future[int]:
    """Delete final rollup minutes that start before ``before``; returns rows deleted."""

    def write(con: duckdb.DuckDBPyConnection) -> int:
        rows = con.execute(
            f"DELETE FROM {rollups.rollup_table(con)} WHERE final AND minute < ?", [before]
        ).fetchall()
        return int(rows[0][0]) if rows else 0

    return store.submit_write(write)


def sample_counts(store: Store, job_ids: Sequence[str]) -> dict[str, int]:
    """Raw sample rows per job of ``job_ids`` (jobs without samples are absent)."""
    if not job_ids:
        return {}
    marks = ", ".join("?" for _ in job_ids)
    rows = store.query(
        f"SELECT job_id, count(*) AS n FROM gpu_samples WHERE job_id IN ({marks}) GROUP BY job_id",
        list(job_ids),
    )
    return {str(r["job_id"]): int(r["n"]) for r in rows.to_pylist()}


def job_sample_nodes(store: Store, job_id: str) -> list[str]:
    """The nodes that have raw samples of ``job_id``, sorted."""
    rows = store.query(
        "SELECT DISTINCT node FROM gpu_samples WHERE job_id = ? ORDER BY node", [job_id]
    )
    return [str(v) for v in rows.column("node").to_pylist()]


def samples_of_job_nodes(store: Store, job_id: str, nodes: Sequence[str]) -> pa.Table:
    """Raw samples of ``job_id`` on ``nodes`` (a slice of a large job, summarised by parts)."""
    marks = ", ".join("?" for _ in nodes)
    return store.query(
        f"SELECT * FROM gpu_samples WHERE job_id = ? AND node IN ({marks})", [job_id, *nodes]
    )
