"""The tables of the notifications capability: the DDL of migration 11.

Queries live in :mod:`hpcscope.store.notify`; this module imports nothing, so the migration
list can reference it.
"""

#: The DDL of migration 11.
NOTIFY_DDL = """
CREATE TABLE notify_audit (
    audit_id VARCHAR PRIMARY KEY,
    "at" TIMESTAMP NOT NULL,
    kind VARCHAR NOT NULL,
    rule_id VARCHAR NOT NULL,
    job_id VARCHAR,
    "user" VARCHAR,
    account VARCHAR,
    channel VARCHAR NOT NULL,
    recipient VARCHAR,
    outcome VARCHAR NOT NULL,
    detail VARCHAR NOT NULL
);
CREATE INDEX notify_audit_lookup ON notify_audit (rule_id, job_id, channel);
CREATE TABLE notify_preferences (
    "user" VARCHAR PRIMARY KEY,
    email_enabled BOOLEAN NOT NULL,
    webhook_enabled BOOLEAN NOT NULL,
    muted_rules_json VARCHAR NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    updated_by VARCHAR NOT NULL
);
CREATE TABLE notify_cancels (
    job_id VARCHAR PRIMARY KEY,
    rule_id VARCHAR NOT NULL,
    phase VARCHAR NOT NULL,
    warned_at TIMESTAMP NOT NULL,
    decided_at TIMESTAMP
);
"""
