"""Writing what the scheduler and the prolog say, and reading it back for attribution.

Several sources describe the same jobs and allocations (prolog records, mapping files,
slurmrestd, sacct). Writes here are merges, so a poll repeated every minute changes nothing the
second time, and a source that knows less never erases what another knew:

* jobs: :meth:`Store.upsert_jobs` (known fields win over nulls);
* allocations: keyed by (job, node, gpu, instance); an end time, once known, is kept;
* aliases: raw Slurm id -> hpcscope job id; applying them renames rows a source stored under
  the raw id (a 22.05 prolog only knows ``SLURM_JOB_ID``) in ``jobs``, ``job_allocations`` and
  ``gpu_samples``, so every table joins on the same id.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from hpcscope.model.schemas import JOB_ALIAS_SCHEMA, JOB_ALLOCATION_SCHEMA
from hpcscope.store.duck import JOB_MERGE_COLUMNS, Store
from hpcscope.store.readings import READINGS, SHARED_JOB_IDS, raw_table


def merge_allocations(store: Store, allocations: pa.Table) -> Future[int]:
    """Insert allocations not yet stored; fill end times of stored ones.

    Returns:
        A future with the number of rows inserted.
    """
    table = allocations.select(JOB_ALLOCATION_SCHEMA.names).cast(JOB_ALLOCATION_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_alloc = table  # noqa: F841  (read by DuckDB's replacement scan)
        key = (
            "a.job_id = i.job_id AND a.node = i.node AND a.gpu = i.gpu "
            "AND a.gpu_instance_id IS NOT DISTINCT FROM i.gpu_instance_id"
        )
        con.execute(
            "UPDATE job_allocations a SET end_time = i.end_time "
            "FROM (SELECT job_id, node, gpu, gpu_instance_id, max(end_time) AS end_time "
            "      FROM incoming_alloc WHERE end_time IS NOT NULL "
            "      GROUP BY ALL) i "
            f"WHERE {key} AND a.end_time IS NULL"
        )
        before = con.execute("SELECT count(*) FROM job_allocations").fetchone()
        con.execute(
            "INSERT INTO job_allocations "
            "SELECT job_id, node, gpu, gpu_instance_id, min(start_time), max(end_time) "
            "FROM incoming_alloc i "
            f"WHERE NOT EXISTS (SELECT 1 FROM job_allocations a WHERE {key}) "
            "GROUP BY job_id, node, gpu, gpu_instance_id"
        )
        after = con.execute("SELECT count(*) FROM job_allocations").fetchone()
        return int(after[0] if after else 0) - int(before[0] if before else 0)

    return store.submit_write(write)


def close_open_allocations(
    store: Store, *, keep_job_ids: set[str], end_time: datetime, node: str | None = None
) -> Future[int]:
    """End the open allocations (on ``node``, or anywhere) of jobs not in ``keep_job_ids``.

    For a complete view of what runs: the scheduler's job list (a job slurmctld no longer lists
    as running holds no GPU), or a node's mapping files.

    Returns:
        A future with the number of allocations ended.
    """
    keep = sorted(keep_job_ids)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        params: list[Any] = [end_time]
        clause = ""
        if node is not None:
            clause += " AND node = ?"
            params.append(node)
        if keep:
            clause += f" AND job_id NOT IN ({', '.join('?' for _ in keep)})"
            params.extend(keep)
        rows = con.execute(
            "UPDATE job_allocations SET end_time = greatest(start_time, ?) "
            f"WHERE end_time IS NULL{clause} RETURNING job_id",
            params,
        ).fetchall()
        return len(rows)

    return store.submit_write(write)


def upsert_aliases(store: Store, aliases: pa.Table) -> Future[int]:
    """Record raw id -> job id pairs, then rename rows stored under a raw id (see module)."""
    table = aliases.select(JOB_ALIAS_SCHEMA.names).cast(JOB_ALIAS_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_aliases = table  # noqa: F841  (read by DuckDB's replacement scan)
        con.execute(
            "INSERT INTO job_aliases (raw_job_id, job_id, cluster) "
            "SELECT raw_job_id, last(job_id), last(cluster) FROM incoming_aliases "
            "GROUP BY raw_job_id "
            "ON CONFLICT (raw_job_id) DO UPDATE SET job_id = excluded.job_id, "
            "cluster = COALESCE(excluded.cluster, job_aliases.cluster)"
        )
        _apply_aliases(con)
        return int(table.num_rows)

    return store.submit_write(write)


def _apply_aliases(con: duckdb.DuckDBPyConnection) -> None:
    """Rename raw-id rows to their job id in jobs, job_allocations and the GPU samples."""
    pending = con.execute(
        "SELECT a.raw_job_id, a.job_id FROM job_aliases a "
        "WHERE a.raw_job_id <> a.job_id AND ("
        " EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = a.raw_job_id) OR"
        " EXISTS (SELECT 1 FROM job_allocations l WHERE l.job_id = a.raw_job_id) OR"
        " EXISTS (SELECT 1 FROM gpu_samples s WHERE s.job_id = a.raw_job_id))"
    ).fetchall()
    for raw, job_id in pending:
        columns = ", ".join(f'"{c}"' for c in JOB_MERGE_COLUMNS)
        updates = ", ".join(
            f'"{c}" = COALESCE(jobs."{c}", excluded."{c}")' for c in JOB_MERGE_COLUMNS
        )
        con.execute(
            f"INSERT INTO jobs (job_id, {columns}, source) "
            f"SELECT ?, {columns}, source FROM jobs WHERE job_id = ? "
            f"ON CONFLICT (job_id) DO UPDATE SET {updates}",
            [job_id, raw],
        )
        con.execute("DELETE FROM jobs WHERE job_id = ?", [raw])
        con.execute("UPDATE job_allocations SET job_id = ? WHERE job_id = ?", [job_id, raw])
        samples = raw_table(con)
        con.execute(f"UPDATE {samples} SET job_id = ? WHERE job_id = ?", [job_id, raw])
        if samples == READINGS:  # the further jobs of shared GPUs
            con.execute(
                f"UPDATE {READINGS} SET {SHARED_JOB_IDS} = list_transform({SHARED_JOB_IDS}, "
                "lambda x: CASE WHEN x = ? THEN ? ELSE x END) "
                f"WHERE list_contains({SHARED_JOB_IDS}, ?)",
                [raw, job_id, raw],
            )
    renamed = sorted({str(job_id) for _, job_id in pending})
    if renamed:
        # two sources may now hold the same allocation under one id: keep one, with its end
        marks = ", ".join("?" for _ in renamed)
        merged = con.execute(
            "SELECT job_id, node, gpu, gpu_instance_id, min(start_time), max(end_time) "
            f"FROM job_allocations WHERE job_id IN ({marks}) "
            "GROUP BY job_id, node, gpu, gpu_instance_id",
            renamed,
        ).fetchall()
        con.execute(f"DELETE FROM job_allocations WHERE job_id IN ({marks})", renamed)
        if merged:
            con.executemany("INSERT INTO job_allocations VALUES (?, ?, ?, ?, ?, ?)", merged)


def job_id_for_labels(store: Store, labels: list[str]) -> dict[str, str]:
    """Resolve mapping labels (raw or canonical ids) to job ids; unknown labels map to
    themselves."""
    if not labels:
        return {}
    unique = sorted(set(labels))
    # one list parameter, not one per label: binding 256 markers costs ~3x the query
    rows = store.query(
        "SELECT raw_job_id, job_id FROM job_aliases "
        "WHERE raw_job_id IN (SELECT unnest(?::VARCHAR[]))",
        [unique],
    ).to_pylist()
    resolved = {str(r["raw_job_id"]): str(r["job_id"]) for r in rows}
    return {label: resolved.get(label, label) for label in unique}


def attribution_state(
    store: Store, *, since: datetime, until: datetime
) -> tuple[tuple[object, ...], int]:
    """What GPU attribution reads, in one query: a fingerprint of every allocation and alias
    (count and sum of row hashes), and how many allocation starts or ends fall in
    ``(since, until]`` (where the jobs of a GPU may change without any row changing)."""
    row = store.query_row(
        "SELECT * FROM (SELECT count(*), "
        "sum(hash(job_id, node, gpu, gpu_instance_id, start_time, end_time)), "
        "count(*) FILTER ((start_time > ? AND start_time <= ?) "
        "OR (end_time > ? AND end_time <= ?)) "
        "FROM job_allocations), (SELECT count(*), sum(hash(raw_job_id, job_id)) FROM job_aliases)",
        [since, until, since, until],
    )
    assert row is not None
    return (row[0], row[1], row[3], row[4]), int(row[2])


def allocations_between(
    store: Store, start: datetime, end: datetime, *, job_ids: list[str] | None = None
) -> pa.Table:
    """Allocations overlapping ``[start, end]``, plus every allocation of ``job_ids`` (so a
    label can be checked against its job's allocations at other times), with user and
    account."""
    extra = ""
    params: list[object] = [end, start]
    if job_ids:
        extra = " OR a.job_id IN (SELECT unnest(?::VARCHAR[]))"  # one list parameter
        params.append(sorted(set(job_ids)))
    return store.query(
        "SELECT a.job_id, a.node, a.gpu, a.gpu_instance_id, a.start_time, a.end_time, "
        'j."user", j.account FROM job_allocations a LEFT JOIN jobs j ON j.job_id = a.job_id '
        f"WHERE (a.start_time <= ? AND (a.end_time IS NULL OR a.end_time >= ?)){extra}",
        params,
    )
