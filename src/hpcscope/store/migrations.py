"""Numbered schema migrations for the embedded DuckDB store.

Each migration runs once, in order, inside a transaction, and is recorded in
``schema_migrations``. Never edit a released migration: add the next number. Column names carry
their units (see :mod:`hpcscope.model.schemas`); the Arrow schemas there and the tables here are
checked against each other by a test.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.model.schemas import GPU_METRICS, IB_COUNTER_COLUMNS, ROLLUP_METRICS
from hpcscope.store import readings
from hpcscope.store.capture_ddl import CAPTURES_DDL
from hpcscope.store.cold import COLD_DDL
from hpcscope.store.file_access import FILE_ACCESS_DDL
from hpcscope.store.job_documents import JOB_DOCUMENTS_DDL
from hpcscope.store.node_facts import NODE_FACTS_DDL
from hpcscope.store.notify_ddl import NOTIFY_DDL
from hpcscope.store.telemetry_rules import TELEMETRY_RULES_DDL

#: Migration 18: an alert's container and pod as their own columns. Alerts stored before it
#: named them only in their first evidence item's summary (``"... in pod ns/name; GPU not
#: known..."`` or ``"... in container name; GPU not known..."``): they are taken from there.
_ALERT_PLACE_SQL = r"""
ALTER TABLE alerts ADD COLUMN container VARCHAR;
ALTER TABLE alerts ADD COLUMN pod VARCHAR;
UPDATE alerts SET
    container = nullif(regexp_extract(json_extract_string(evidence_json, '$[0].summary'),
        ' in container (\S+); GPU not known', 1), ''),
    pod = nullif(regexp_extract(json_extract_string(evidence_json, '$[0].summary'),
        ' in pod (\S+); GPU not known', 1), '');
"""


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

_ROLLUP_COLUMNS = ",\n    ".join(
    f"{name}_{part} {'BIGINT' if part == 'count' else 'DOUBLE'}"
    for name, _ in ROLLUP_METRICS
    for part in ("min", "mean", "max", "count")
)

#: The aggregate of one (minute, GPU, job) of ``gpu_samples``, shared by the backfill below
#: and by :mod:`hpcscope.store.rollups` (which runs it on the minutes an append touched).
ROLLUP_SELECT = (
    "time_bucket(INTERVAL '1 minute', s.ts) AS minute, s.node, s.gpu, s.gpu_instance_id, "
    "s.job_id, count(*) AS samples, min(s.ts) AS first_ts, max(s.ts) AS last_ts, "
    + ", ".join(
        f"min(s.{column}) AS {name}_min, avg(s.{column}) AS {name}_mean, "
        f"max(s.{column}) AS {name}_max, count(s.{column}) AS {name}_count"
        for name, column in ROLLUP_METRICS
    )
)

_JOB_ROLLUP_COLUMNS = ",\n    ".join(
    f"min({name}_min) AS {name}_min, "
    f"sum({name}_mean * {name}_count) / nullif(sum({name}_count), 0) AS {name}_mean, "
    f"max({name}_max) AS {name}_max, sum({name}_count)::BIGINT AS {name}_count"
    for name, _ in ROLLUP_METRICS
)

#: Migration 17: the rollup rows' table, the time from which raw samples are not yet in it,
#: and ``gpu_rollups_1m`` as the view of both (:mod:`hpcscope.store.rollups`, "Pending").
ROLLUP_ROWS = "gpu_rollup_rows"
ROLLUP_STATE = "rollup_state"

_PENDING_SQL = f"""
ALTER TABLE gpu_rollups_1m RENAME TO {ROLLUP_ROWS};
CREATE TABLE {ROLLUP_STATE} (pending_from TIMESTAMP);
INSERT INTO {ROLLUP_STATE} SELECT max(minute) + INTERVAL '1 minute' FROM {ROLLUP_ROWS};
CREATE VIEW gpu_rollups_1m AS
SELECT * FROM {ROLLUP_ROWS}
UNION ALL BY NAME
(SELECT {ROLLUP_SELECT}, FALSE AS final FROM gpu_samples s
 WHERE s.ts >= (SELECT pending_from FROM {ROLLUP_STATE}) GROUP BY ALL);
"""
"""The rows stored so far stay as they are (partial rows included): every sample of a minute
after the newest rollup row is still raw and none before it is."""

#: Default seconds after a minute's end before it is final (the backfill of migration 8 uses it;
#: the store's ``rollup_grace_seconds`` setting rules afterwards).
DEFAULT_ROLLUP_GRACE_SECONDS = 120.0

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
        "kept job summaries: one row per finished job and per GPU of it, written once",
        """
CREATE TABLE job_summaries (
    job_id VARCHAR PRIMARY KEY,
    summarised_at TIMESTAMP NOT NULL,
    "user" VARCHAR,
    account VARCHAR,
    partition VARCHAR,
    state VARCHAR,
    exit_code INTEGER,
    exit_cause VARCHAR NOT NULL,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    elapsed_seconds DOUBLE,
    gpus_allocated INTEGER,
    gpus_observed INTEGER NOT NULL,
    reported_util_ratio DOUBLE,
    sm_active_ratio DOUBLE,
    tensor_active_ratio DOUBLE,
    allocated_gpu_seconds DOUBLE,
    observed_gpu_seconds DOUBLE NOT NULL,
    useful_gpu_seconds DOUBLE NOT NULL,
    energy_joules DOUBLE,
    verdict VARCHAR NOT NULL,
    first_sample_ts TIMESTAMP,
    last_sample_ts TIMESTAMP,
    phases_json VARCHAR,
    straggler_verdict VARCHAR
);
CREATE TABLE job_gpu_summaries (
    job_id VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    gpu_instance_id SMALLINT,
    observed_seconds DOUBLE NOT NULL,
    reported_util_ratio DOUBLE,
    sm_active_ratio DOUBLE,
    tensor_active_ratio DOUBLE,
    sm_occupancy_ratio DOUBLE,
    dram_active_ratio DOUBLE,
    power_watts DOUBLE,
    sm_clock_hertz DOUBLE,
    useful_seconds DOUBLE NOT NULL,
    energy_joules DOUBLE,
    max_temperature_celsius DOUBLE,
    throttle_reasons BIGINT NOT NULL,
    slowdown_share DOUBLE,
    xid BIGINT,
    max_fb_used_bytes DOUBLE,
    first_ts TIMESTAMP,
    last_ts TIMESTAMP,
    peer_sm_active_ratio DOUBLE,
    verdict VARCHAR NOT NULL
);
""",
    ),
    Migration(
        8,
        "1-minute rollups of gpu samples per GPU and job (backfilled from the stored samples)",
        f"""
CREATE TABLE gpu_rollups_1m (
    minute TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu SMALLINT NOT NULL,
    gpu_instance_id SMALLINT,
    job_id VARCHAR,
    samples BIGINT NOT NULL,
    first_ts TIMESTAMP NOT NULL,
    last_ts TIMESTAMP NOT NULL,
    {_ROLLUP_COLUMNS},
    final BOOLEAN NOT NULL
);
INSERT INTO gpu_rollups_1m
SELECT {ROLLUP_SELECT},
    time_bucket(INTERVAL '1 minute', s.ts) + INTERVAL '1 minute'
        + to_microseconds({int(DEFAULT_ROLLUP_GRACE_SECONDS * 1e6)})
        <= (SELECT max(ts) FROM gpu_samples) AS final
FROM gpu_samples s GROUP BY ALL;
CREATE VIEW job_rollups_1m AS
SELECT minute, job_id, count(DISTINCT (node, gpu, gpu_instance_id)) AS gpus,
    sum(samples)::BIGINT AS samples, bool_and(final) AS final,
    {_JOB_ROLLUP_COLUMNS}
FROM gpu_rollups_1m WHERE job_id IS NOT NULL GROUP BY minute, job_id;
""",
    ),
    Migration(
        9,
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
    Migration(
        10,
        "api tokens: hashed, scoped (read or admin), expiring, revocable, last used",
        # the SHA-256 of each token, never the token (hpcscope.store.identity)
        """
CREATE TABLE api_tokens (
    token_id VARCHAR PRIMARY KEY,
    secret_sha256 VARCHAR NOT NULL UNIQUE,
    "user" VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    label VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL,
    created_by VARCHAR NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    revoked_at TIMESTAMP,
    revoked_by VARCHAR,
    last_used_at TIMESTAMP,
    last_used_address VARCHAR
);
""",
    ),
    Migration(
        11,
        "notifications: audit log, per-user preferences, warn-then-cancel state",
        NOTIFY_DDL,
    ),
    Migration(
        12, "trace captures: per job and capture window, phases and stragglers", CAPTURES_DDL
    ),
    Migration(
        13,
        "lustre_changelog, gpu_processes: what the telemetry rules read (DP-1/2, GM-1/2)",
        TELEMETRY_RULES_DDL,
    ),
    Migration(
        14,
        "file_access: who opened, read, mmapped or wrote a protected path (who read my weights)",
        FILE_ACCESS_DDL,
    ),
    Migration(
        15,
        "one gpu_readings row per GPU and time with its job(s); gpu_samples becomes its view",
        readings.MIGRATION_SQL,
    ),
    Migration(
        16,
        "gpu_xid_counts, node_posture: Xid counts (GM-4), posture checks (SC-7, CE-5, GM-5, DP-3)",
        NODE_FACTS_DDL,
    ),
    Migration(
        17,
        "rollups of the open minutes read from raw samples; partial rows written once a minute",
        _PENDING_SQL,
    ),
    Migration(18, "alerts: the container and pod an event ran in, as columns", _ALERT_PLACE_SQL),
    Migration(
        19,
        "cold_parts: raw samples past retention moved to Parquet (zstd, one directory per day)",
        COLD_DDL,
    ),
    Migration(
        20,
        "job_documents: finished jobs' documents (a job's time series) stored once, compressed",
        JOB_DOCUMENTS_DDL,
    ),
)
