"""SC-4, GM-1, GM-2 over GPU samples, allocations and NVML process lists."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.telemetry_rules.common import GpuAllocation, JobSpan
from hpcscope.analysis.telemetry_rules.gpu import gpu_alerts
from hpcscope.model.alerts import RuleSpec, Severity
from tests.analysis.telemetry_rules.conftest import T0

MIB = 2**20
EMPTY_PROCS = pl.DataFrame(
    schema={"ts": pl.Datetime("us"), "node": pl.String, "gpu": pl.Int16, "pid": pl.Int64,
            "process_name": pl.String, "used_memory_bytes": pl.Float64, "job_id": pl.String}
)  # fmt: skip
JOBS = {
    "7": JobSpan("7", "alice", "vision", ("n1",), T0),
    "8": JobSpan("8", "bob", "nlp", ("n1",), T0),
}


def samples(rows: Sequence[tuple[float, int, str | None, float, float, float]]) -> pl.DataFrame:
    """(seconds, gpu, job, util, sm active, fb MiB) rows of node n1."""
    return pl.DataFrame(
        [{"ts": T0 + timedelta(seconds=t), "node": "n1", "gpu": g, "job_id": j,
          "reported_util_ratio": u, "sm_active_ratio": sm, "fb_used_bytes": fb * MIB}
         for t, g, j, u, sm, fb in rows],
        schema_overrides={"gpu": pl.Int16, "job_id": pl.String},
    )  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(busy_scrapes=st.integers(1, 20), gpu=st.integers(0, 7))
def test_sc4_fires_exactly_from_two_minutes(
    rules: dict[str, RuleSpec], busy_scrapes: int, gpu: int
) -> None:
    rows = [(15.0 * k, gpu, None, 0.95 if 2 <= k < 2 + busy_scrapes else 0.0, 0.0, 400.0)
            for k in range(30)]  # fmt: skip
    found = gpu_alerts(samples(rows), EMPTY_PROCS, [], {}, rules=rules)
    lasting = 15.0 * (busy_scrapes - 1) >= 120
    assert [(a.rule_id, a.gpu, a.severity) for a in found] == (
        [("SC-4", gpu, Severity.CRITICAL)] if lasting else []
    )


def test_sc4_is_quiet_while_a_job_is_mapped(rules: dict[str, RuleSpec]) -> None:
    rows = [(15.0 * k, 0, "7", 0.95, 0.8, 60000.0) for k in range(30)]
    assert gpu_alerts(samples(rows), EMPTY_PROCS, [], JOBS, rules=rules) == []


def _ended() -> list[GpuAllocation]:
    return [GpuAllocation("7", "n1", g, T0, T0 + timedelta(minutes=5)) for g in range(2)]


def test_gm1_memory_held_after_the_epilog_names_the_job(rules: dict[str, RuleSpec]) -> None:
    rows = [(15.0 * k, g, None, 0.0, 0.0, 30720.0 if g == 1 else 400.0)
            for k in range(20, 36) for g in range(2)]  # fmt: skip
    found = gpu_alerts(samples(rows), EMPTY_PROCS, _ended(), JOBS, rules=rules)
    assert [(a.rule_id, a.gpu, a.job_id, a.user, a.severity) for a in found] == [
        ("GM-1", 1, "7", "alice", Severity.HIGH)
    ]
    first = found[0].first_seen
    assert first >= T0 + timedelta(minutes=5, seconds=60)  # the grace after the epilog


def test_gm1_critical_while_nvml_lists_a_process(rules: dict[str, RuleSpec]) -> None:
    rows = [(15.0 * k, 1, None, 0.0, 0.0, 30720.0) for k in range(22, 30)]
    procs = pl.DataFrame(
        [{"ts": T0 + timedelta(seconds=390), "node": "n1", "gpu": 1, "pid": 99,
          "process_name": "python3", "used_memory_bytes": 30720.0 * MIB, "job_id": None}],
        schema=EMPTY_PROCS.schema,
    )  # fmt: skip
    found = gpu_alerts(samples(rows), procs, _ended(), JOBS, rules=rules)
    assert [(a.rule_id, a.severity) for a in found] == [("GM-1", Severity.CRITICAL)]
    assert "python3 (pid 99)" in found[0].evidence[0].summary


def test_gm2_process_of_another_job(rules: dict[str, RuleSpec]) -> None:
    held = [GpuAllocation("7", "n1", 0, T0, None), GpuAllocation("8", "n1", 1, T0, None)]
    procs = pl.DataFrame(
        [{"ts": T0 + timedelta(seconds=60 + 15 * k), "node": "n1", "gpu": 0, "pid": pid,
          "process_name": "python3", "used_memory_bytes": 1e9, "job_id": job}
         for k in range(4) for pid, job in ((10, "7"), (20, "8"))],
        schema=EMPTY_PROCS.schema,
    )  # fmt: skip
    found = gpu_alerts(samples([]), procs, held, JOBS, rules=rules)
    assert [(a.rule_id, a.gpu, a.job_id, a.subject, a.count) for a in found] == [
        ("GM-2", 0, "8", "pid 20", 4)
    ]
