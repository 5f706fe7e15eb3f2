"""Numbered schema migrations for the embedded DuckDB store.

Each migration runs once, in order, inside a transaction, and is recorded in
``schema_migrations``. Never edit a released migration: add the next number. Column names carry
their units (see :mod:`hpcscope.model.schemas`); the Arrow schemas there and the tables here are
checked against each other by a test.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.model.schemas import GPU_METRICS, IB_COUNTER_COLUMNS


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


#: Columns that a later migration renamed, under the name the migration that created them
#: used: a released migration's SQL never changes (migration 6 renamed the first one).
_RENAMED = {"reported_util_ratio": "gpu_util_ratio"}

_METRIC_COLUMNS = ",\n    ".join(
    f"{_RENAMED.get(m.column, m.column)} "
    f"{'BIGINT' if m.column in ('clock_throttle_reasons', 'xid_last') else 'DOUBLE'}"
    for m in GPU_METRICS
)

_IB_COUNTERS = ",\n    ".join(f"{column} DOUBLE" for column in IB_COUNTER_COLUMNS)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial: gpu samples, scrapes, gaps, jobs, allocations, accounts",
        f"""
CREATE TABLE gpu_samples (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    gpu_instance_id SMALLINT,
    job_id VARCHAR,
    {_METRIC_COLUMNS}
);
CREATE TABLE scrapes (
    ts TIMESTAMP NOT NULL,
    target VARCHAR NOT NULL,
    exporter VARCHAR NOT NULL,
    node VARCHAR,
    ok BOOLEAN NOT NULL,
    duration_seconds DOUBLE NOT NULL,
    samples BIGINT NOT NULL,
    rejected_lines BIGINT NOT NULL,
    error VARCHAR
);
CREATE TABLE collection_gaps (
    target VARCHAR NOT NULL,
    node VARCHAR,
    start_ts TIMESTAMP NOT NULL,
    end_ts TIMESTAMP NOT NULL,
    reason VARCHAR NOT NULL
);
CREATE TABLE jobs (
    job_id VARCHAR PRIMARY KEY,
    cluster VARCHAR,
    name VARCHAR,
    "user" VARCHAR,
    account VARCHAR,
    partition VARCHAR,
    qos VARCHAR,
    state VARCHAR,
    exit_code INTEGER,
    submit_time TIMESTAMP,
    eligible_time TIMESTAMP,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    time_limit_seconds BIGINT,
    gpus INTEGER,
    nodes VARCHAR,
    source VARCHAR NOT NULL
);
CREATE TABLE job_allocations (
    job_id VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    gpu_instance_id SMALLINT,
    start_time TIMESTAMP NOT NULL,
    end_time TIMESTAMP
);
CREATE TABLE account_memberships (
    "user" VARCHAR NOT NULL,
    account VARCHAR NOT NULL,
    coordinator BOOLEAN NOT NULL,
    PRIMARY KEY ("user", account)
);
""",
    ),
    Migration(
        2,
        "job aliases: raw Slurm ids of array tasks and het components",
        """
CREATE TABLE job_aliases (
    raw_job_id VARCHAR NOT NULL,
    job_id VARCHAR NOT NULL,
    cluster VARCHAR,
    PRIMARY KEY (raw_job_id)
);
""",
    ),
    Migration(
        3,
        "infiniband port counters from node_exporter",
        f"""
CREATE TABLE ib_port_counters (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    device VARCHAR NOT NULL,
    port SMALLINT NOT NULL,
    hca_type VARCHAR,
    firmware_version VARCHAR,
    board_id VARCHAR,
    state_id TINYINT,
    physical_state_id TINYINT,
    rate_bytes_per_second DOUBLE,
    {_IB_COUNTERS}
);
""",
    ),
    Migration(
        4,
        "trace analyses: per-rank phases and stragglers of uploaded profiler traces",
        """
CREATE TABLE trace_analyses (
    analysis_id VARCHAR PRIMARY KEY,
    owner_user VARCHAR NOT NULL,
    owner_accounts VARCHAR[] NOT NULL,
    job_id VARCHAR,
    account VARCHAR,
    created TIMESTAMP NOT NULL,
    source_names VARCHAR[] NOT NULL,
    ranks INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    partial BOOLEAN NOT NULL,
    slowdown DOUBLE,
    straggler_ranks INTEGER[] NOT NULL,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    result_json VARCHAR NOT NULL
);
""",
    ),
    Migration(
        5,
        "lustre job_stats: per-job operation counters of OSTs and MDTs",
        """
CREATE TABLE lustre_job_stats (
    ts TIMESTAMP NOT NULL,
    server VARCHAR NOT NULL,
    target VARCHAR,
    component VARCHAR,
    job_id_raw VARCHAR NOT NULL,
    job_id VARCHAR,
    host VARCHAR,
    operation VARCHAR NOT NULL,
    unit VARCHAR NOT NULL,
    samples DOUBLE NOT NULL,
    sum_value DOUBLE,
    min_value DOUBLE,
    max_value DOUBLE,
    start_ts TIMESTAMP
);
""",
    ),
    Migration(
        6,
        "one name for DCGM's GPU_UTIL: gpu_samples.gpu_util_ratio -> reported_util_ratio",
        "ALTER TABLE gpu_samples RENAME COLUMN gpu_util_ratio TO reported_util_ratio;",
    ),
    Migration(
        7,
        "alerts: deduplicated rule findings with state (open, acknowledged, resolved)",
        """
CREATE TABLE alerts (
    dedup_key VARCHAR PRIMARY KEY,
    rule_id VARCHAR NOT NULL,
    vector TINYINT NOT NULL,
    severity TINYINT NOT NULL,
    title VARCHAR NOT NULL,
    first_seen TIMESTAMP NOT NULL,
    last_seen TIMESTAMP NOT NULL,
    count BIGINT NOT NULL,
    node VARCHAR,
    job_id VARCHAR,
    "user" VARCHAR,
    account VARCHAR,
    gpu SMALLINT,
    subject VARCHAR,
    step BIGINT,
    evidence_json VARCHAR NOT NULL,
    state VARCHAR NOT NULL,
    state_by VARCHAR,
    state_at TIMESTAMP
);
""",
    ),
)
