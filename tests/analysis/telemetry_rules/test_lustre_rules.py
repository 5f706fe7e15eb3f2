"""DP-1, DP-2, DP-4 over changelog records and job_stats; job_stats increases."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.telemetry_rules.common import JobSpan
from hpcscope.analysis.telemetry_rules.lustre import job_stats_increases, lustre_alerts
from hpcscope.model.alerts import RuleSpec, Severity
from tests.analysis.telemetry_rules.conftest import T0

DATASET = "/lustre/datasets/imagenet"
JOBS = {
    "1": JobSpan("1", "alice", "vision", ("n1",), T0, partition="gpu"),
    "2": JobSpan("2", "bob", "nlp", ("n2",), T0, partition="gpu"),
    "3": JobSpan("3", "alice", "vision", ("n3",), T0, partition="curation"),
}


def _rules(rules: dict[str, RuleSpec]) -> dict[str, RuleSpec]:
    dp1 = rules["DP-1"]
    lists = dict(dp1.lists) | {"datasets": (f"{DATASET} vision OST4,OST5",)}
    return dict(rules) | {"DP-1": replace(dp1, lists=lists)}


def changelog(rows: list[tuple[str, str, str | None, str | None]]) -> pl.DataFrame:
    """(record type, path, job, host) records."""
    return pl.DataFrame(
        [{"ts": T0 + timedelta(seconds=i), "mdt": "fs-MDT0000", "record_index": i,
          "record_type": kind, "path": path, "job_id": job, "host": host,
          "job_id_raw": None if job is None else f"{job}:0:{host}", "uid": 1001,
          "name": path.rsplit("/", 1)[-1]}
         for i, (kind, path, job, host) in enumerate(rows)],
        schema_overrides={"job_id": pl.String, "host": pl.String, "job_id_raw": pl.String},
    )  # fmt: skip


def job_stats(rows: list[tuple[float, str, str, str, float]]) -> pl.DataFrame:
    """(seconds, target, job, operation, cumulative bytes) snapshots."""
    return pl.DataFrame(
        [{"server": "oss1", "target": target, "job_id_raw": f"{job}:0:n", "job_id": job,
          "host": None, "operation": op, "ts": T0 + timedelta(seconds=t), "sum_value": v,
          "start_ts": T0}
         for t, target, job, op, v in rows],
        schema_overrides={"host": pl.String},
    )  # fmt: skip


NO_STATS = job_stats([])


def test_dp1_foreign_write_fires_and_curation_does_not(rules: dict[str, RuleSpec]) -> None:
    records = changelog([
        ("RENME", f"{DATASET}/train/a.tar", "2", "n2"),
        ("CREAT", f"{DATASET}/train/b.tar", "3", "n3"),
        ("CREAT", "/lustre/scratch/x", "2", "n2"),
        ("OPEN", f"{DATASET}/train/c.tar", "2", "n2"),
    ])  # fmt: skip
    found = lustre_alerts(records, NO_STATS, JOBS, rules=_rules(rules))
    assert [(a.rule_id, a.severity, a.job_id, a.node, a.subject) for a in found] == [
        ("DP-1", Severity.HIGH, "2", "n2", DATASET)
    ]


def test_dp1_is_critical_while_a_training_job_reads(rules: dict[str, RuleSpec]) -> None:
    stats = job_stats([(0, "OST4", "1", "read_bytes", 0.0), (30, "OST4", "1", "read_bytes", 5e9)])
    records = changelog([("UNLNK", f"{DATASET}/train/a.tar", "2", "n2")])
    found = lustre_alerts(records, stats, JOBS, rules=_rules(rules))
    assert [(a.rule_id, a.severity) for a in found] == [("DP-1", Severity.CRITICAL)]
    assert "training jobs reading the dataset: 1" in found[0].evidence[0].summary


def test_dp2_any_write_to_the_manifest(rules: dict[str, RuleSpec]) -> None:
    records = changelog([("TRUNC", f"{DATASET}/MANIFEST.sha256", "3", "n3")])
    found = lustre_alerts(records, NO_STATS, JOBS, rules=_rules(rules))
    assert [(a.rule_id, a.severity, a.job_id) for a in found] == [("DP-2", Severity.CRITICAL, "3")]


def test_dp4_training_writes_on_dataset_targets(rules: dict[str, RuleSpec]) -> None:
    stats = job_stats([
        (15, "OST5", "1", "write_bytes", 1e8), (30, "OST5", "1", "write_bytes", 3e8),
        (15, "OST5", "3", "write_bytes", 1e9), (15, "OST1", "2", "write_bytes", 1e9),
    ])  # fmt: skip
    found = lustre_alerts(changelog([]).clear(), stats, JOBS, rules=_rules(rules))
    assert {(a.rule_id, a.severity, a.job_id, a.node) for a in found} == {
        ("DP-4", Severity.MEDIUM, "1", "n1")
    }


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.integers(0, 10**9), min_size=1, max_size=30))
def test_increases_add_up_to_the_counter(steps: list[int]) -> None:
    """Without restarts the increases of a cumulative counter sum to its last value."""
    values = [float(sum(steps[: i + 1])) for i in range(len(steps))]
    rows = [(15.0 * (i + 1), "OST1", "1", "read_bytes", v) for i, v in enumerate(values)]
    increases = job_stats_increases(job_stats(rows), ("read_bytes",))
    assert increases["bytes"].sum() == values[-1]
