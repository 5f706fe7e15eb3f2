"""What the telemetry rules read: Lustre changelog records and NVML process lists (migration
13), and the windows of the other tables they judge (jobs, allocations, GPU samples).

``lustre_changelog`` keeps each record once (``mdt, record_index``): a changelog reader that
reads a record again (after a restart, before it cleared the records) adds nothing.
``gpu_processes`` is append-only, one row per process per read.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from hpcscope.model.schemas import GPU_PROCESS_SCHEMA, LUSTRE_CHANGELOG_SCHEMA
from hpcscope.store.filters import Where

if TYPE_CHECKING:  # the migrations import this module's DDL before ``duck`` exists
    from hpcscope.store.duck import Store

TELEMETRY_RULES_DDL = """
CREATE TABLE lustre_changelog (
    ts TIMESTAMP NOT NULL,
    mdt VARCHAR NOT NULL,
    record_index BIGINT NOT NULL,
    record_type VARCHAR NOT NULL,
    flags VARCHAR,
    target_fid VARCHAR,
    parent_fid VARCHAR,
    name VARCHAR,
    source_fid VARCHAR,
    source_parent_fid VARCHAR,
    source_name VARCHAR,
    job_id_raw VARCHAR,
    job_id VARCHAR,
    host VARCHAR,
    uid BIGINT,
    gid BIGINT,
    nid VARCHAR,
    path VARCHAR,
    source VARCHAR NOT NULL,
    line BIGINT NOT NULL,
    PRIMARY KEY (mdt, record_index)
);
CREATE INDEX lustre_changelog_ts ON lustre_changelog (ts);
CREATE TABLE gpu_processes (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    gpu_uuid VARCHAR,
    pid BIGINT NOT NULL,
    process_name VARCHAR,
    used_memory_bytes DOUBLE,
    job_id VARCHAR
);
"""


def append_changelog(store: Store, rows: pa.Table) -> Future[int]:
    """Store changelog records (:data:`LUSTRE_CHANGELOG_SCHEMA`) not stored yet.

    Returns:
        A future with the number of records written.
    """
    table = rows.select(LUSTRE_CHANGELOG_SCHEMA.names).cast(LUSTRE_CHANGELOG_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_changelog = table  # noqa: F841  (read by DuckDB's replacement scan)
        result = con.execute(
            "INSERT INTO lustre_changelog BY NAME "
            "SELECT DISTINCT ON (mdt, record_index) * FROM incoming_changelog "
            "ON CONFLICT DO NOTHING"
        ).fetchall()
        return int(result[0][0]) if result else 0

    return store.submit_write(write)


def append_gpu_processes(store: Store, rows: pa.Table) -> Future[int]:
    """Append NVML process rows (:data:`GPU_PROCESS_SCHEMA`); returns the number written."""
    table = rows.select(GPU_PROCESS_SCHEMA.names).cast(GPU_PROCESS_SCHEMA)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if table.num_rows == 0:
            return 0
        incoming_processes = table  # noqa: F841  (read by DuckDB's replacement scan)
        con.execute("INSERT INTO gpu_processes BY NAME SELECT * FROM incoming_processes")
        return int(table.num_rows)

    return store.submit_write(write)


def changelog(
    store: Store, *, since: datetime | None = None, until: datetime | None = None
) -> pa.Table:
    """Stored changelog records with ``since <= ts <= until``, in record order."""
    where = Where().window(since, until)
    return store.query(
        f"SELECT * FROM lustre_changelog {where.sql()} ORDER BY ts, mdt, record_index",
        where.params,
    ).cast(LUSTRE_CHANGELOG_SCHEMA)


def gpu_processes(
    store: Store, *, since: datetime | None = None, until: datetime | None = None
) -> pa.Table:
    """Stored NVML process rows with ``since <= ts <= until``."""
    where = Where().window(since, until)
    return store.query(
        f"SELECT * FROM gpu_processes {where.sql()} ORDER BY node, gpu, ts, pid", where.params
    ).cast(GPU_PROCESS_SCHEMA)


def gpu_samples(store: Store, *, since: datetime, until: datetime) -> pa.Table:
    """The GPU samples the GPU rules read (``ts, node, gpu, job_id``, utilisation, SM active,
    framebuffer used) with ``since <= ts <= until``, of the GPUs with a sample of no job then.

    SC-4 and GM-1 judge only GPUs that had a sample with no job in the window (a GPU whose
    every sample has a job raises neither), so only those GPUs' samples are read, all of them
    (SC-4's runs are split by the samples that have a job). The rules run after every
    collector cycle over 15 minutes of samples: on a 1,024-GPU cluster where every GPU has a
    job this reads none instead of ~900,000 rows a second (``docs/benchmarks.md``, ingest)."""
    return store.query(
        "SELECT ts, node, gpu, job_id, reported_util_ratio, sm_active_ratio, fb_used_bytes "
        "FROM gpu_samples WHERE ts BETWEEN ? AND ? AND (node, gpu) IN ("
        "SELECT DISTINCT node, gpu FROM gpu_samples WHERE ts BETWEEN ? AND ? AND job_id IS NULL"
        ") ORDER BY node, gpu, ts",
        [since, until, since, until],
    )


def jobs_overlapping(store: Store, *, since: datetime, until: datetime) -> pa.Table:
    """Jobs that ran at some time in ``[since, until]`` (started, not ended before ``since``):
    ``job_id, user, account, partition, qos, nodes, start_time, end_time``."""
    return store.query(
        'SELECT job_id, "user", account, partition, qos, nodes, start_time, end_time '
        "FROM jobs WHERE start_time IS NOT NULL AND start_time <= ? "
        "AND (end_time IS NULL OR end_time >= ?) ORDER BY job_id",
        [until, since],
    )


def allocation_nodes(store: Store, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """Nodes each job holds according to the platform's allocations (prolog records)."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    rows = store.query(
        f"SELECT DISTINCT job_id, node FROM job_allocations WHERE job_id IN ({marks}) "
        "ORDER BY job_id, node",
        wanted,
    ).to_pylist()
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(str(row["job_id"]), []).append(str(row["node"]))
    return out


def path_creators(store: Store, paths: Sequence[str]) -> dict[str, str]:
    """For each of ``paths`` with a changelog ``CREAT`` record, the job of its latest one."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    rows = store.query(
        f"SELECT path, job_id FROM lustre_changelog WHERE record_type = 'CREAT' "
        f"AND job_id IS NOT NULL AND path IN ({marks}) ORDER BY ts, record_index",
        wanted,
    ).to_pylist()
    return {str(r["path"]): str(r["job_id"]) for r in rows}
