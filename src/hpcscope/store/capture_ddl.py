"""DDL of the trace-capture table (migration 12): one row per job and capture window.

``result_json`` is the window's analysis document (``hpcscope.traces.analysis/1``, without the
telemetry evidence, which is added when the job page is read); the other columns are what lists
and the job page need without parsing it. ``job_id`` is the job the *platform* places the ranks
on (their node and GPU in the allocations at the window's time); ``claimed_job_id`` the spool
directory the job wrote to; ``attribution`` says which of the two the row rests on
(``verified``: every rank placed on the job; ``partly verified``; ``unverified``: no rank placed,
the claim is all there is; ``mismatch``: the platform names another job for some rank).
"""

from __future__ import annotations

CAPTURES_DDL = """
CREATE TABLE trace_captures (
    job_id VARCHAR NOT NULL,
    capture_window BIGINT NOT NULL,
    claimed_job_id VARCHAR NOT NULL,
    updated TIMESTAMP NOT NULL,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    ranks INTEGER NOT NULL,
    world_size INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    nodes VARCHAR[] NOT NULL,
    attribution VARCHAR NOT NULL,
    straggler_rank INTEGER,
    straggler_phase VARCHAR,
    straggler_node VARCHAR,
    straggler_gpu INTEGER,
    delay_seconds_per_step DOUBLE,
    what_if_gain_seconds_per_step DOUBLE,
    notes VARCHAR[] NOT NULL,
    result_json VARCHAR NOT NULL,
    PRIMARY KEY (job_id, capture_window)
);
"""
