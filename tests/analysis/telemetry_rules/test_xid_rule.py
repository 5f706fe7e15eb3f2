"""GM-4 over Xid counts as the store holds them: a burst fires only with a new job or an
unknown binary on the GPU; below the threshold, or on codes off the list, it never fires."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.telemetry_rules.common import GpuAllocation, JobSpan
from hpcscope.analysis.telemetry_rules.rules import TelemetryInputs, evaluate
from hpcscope.analysis.telemetry_rules.xid import gm4_xid_burst
from hpcscope.model.alerts import RuleSpec, Severity
from hpcscope.service.alerts.rules import load_site_rules
from tests.analysis.telemetry_rules.conftest import STEP, T0

JOB = JobSpan("7001", "alice", "vision", ("gpu01",), T0 - timedelta(hours=2))
NEW = JobSpan("7002", "bob", "nlp", ("gpu01",), T0 - timedelta(minutes=3))


def counts(
    per_scrape: list[dict[int, int]], *, job: str | None = "7001", gpu: int = 3
) -> pl.DataFrame:
    rows = [
        {"ts": T0 + timedelta(seconds=k * STEP), "node": "gpu01", "gpu": gpu, "job_id": job,
         "xid": xid, "xid_count": float(n)}
        for k, scrape in enumerate(per_scrape)
        for xid, n in scrape.items()
    ]  # fmt: skip
    schema: dict[str, pl.DataType] = {
        "ts": pl.Datetime("us"), "node": pl.String(), "gpu": pl.Int16(), "job_id": pl.String(),
        "xid": pl.Int32(), "xid_count": pl.Float64(),
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def processes(names: list[str], *, gpu: int = 3) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "ts": T0 + timedelta(seconds=30),
                "node": "gpu01",
                "gpu": gpu,
                "pid": 100 + i,
                "process_name": n,
                "used_memory_bytes": 1e9,
                "job_id": "7001",
            }
            for i, n in enumerate(names)
        ]
    )


BURST = [{31: 5}, {31: 12}, {31: 22, 13: 3}, {31: 25}, {31: 8}]


def test_burst_in_a_new_job_fires(rules: dict[str, RuleSpec]) -> None:
    found = gm4_xid_burst(rules["GM-4"], counts(BURST, job="7002"), pl.DataFrame(), (),
                          {"7002": NEW})  # fmt: skip
    assert len(found) == 1
    alert = found[0]
    assert (alert.rule_id, alert.node, alert.gpu, alert.job_id, alert.user) == (
        "GM-4",
        "gpu01",
        3,
        "7002",
        "bob",
    )
    assert alert.severity is Severity.MEDIUM
    assert alert.first_seen == T0 + timedelta(seconds=2 * STEP)
    assert alert.last_seen == T0 + timedelta(seconds=3 * STEP)
    assert "Xid 31 (GPU memory page fault) x22" in alert.evidence[0].summary
    assert "job 7002 started" in alert.evidence[0].summary


def test_burst_in_an_old_job_needs_an_unknown_binary(rules: dict[str, RuleSpec]) -> None:
    spec, jobs = rules["GM-4"], {"7001": JOB}
    assert gm4_xid_burst(spec, counts(BURST), processes(["python3"]), (), jobs) == []
    found = gm4_xid_burst(spec, counts(BURST), processes(["python3", "/tmp/gpuprobe"]), (), jobs)
    assert [a.job_id for a in found] == ["7001"]
    assert "unknown binary /tmp/gpuprobe (pid 101)" in found[0].evidence[0].summary


def test_the_job_comes_from_the_allocations_without_hpc_job(rules: dict[str, RuleSpec]) -> None:
    held = (GpuAllocation("7002", "gpu01", 3, NEW.start, None),)  # type: ignore[arg-type]
    found = gm4_xid_burst(rules["GM-4"], counts(BURST, job=None), pl.DataFrame(), held,
                          {"7002": NEW})  # fmt: skip
    assert [(a.job_id, a.account) for a in found] == [("7002", "nlp")]


def test_codes_off_the_list_do_not_count(rules: dict[str, RuleSpec]) -> None:
    burst = [{79: 40}, {48: 30}]  # fallen off the bus, double-bit ECC: hardware, not GM-4
    assert gm4_xid_burst(rules["GM-4"], counts(burst, job="7002"), pl.DataFrame(), (),
                         {"7002": NEW}) == []  # fmt: skip


def test_evaluate_runs_gm4(rules: dict[str, RuleSpec]) -> None:
    inputs = TelemetryInputs(xid_counts=counts(BURST, job="7002"), jobs=(NEW,))
    assert [a.rule_id for a in evaluate(inputs, rules)] == ["GM-4"]


SPEC = load_site_rules(None)["GM-4"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from([13, 31, 43, 79]), st.integers(0, 40),
                                max_size=3), min_size=1, max_size=12))  # fmt: skip
def test_one_alert_per_burst_of_scrapes_at_the_threshold(scrapes: list[dict[int, int]]) -> None:
    watched = {int(x) for x in SPEC.items("xids")}
    found = gm4_xid_burst(SPEC, counts(scrapes, job="7002"), pl.DataFrame(), (), {"7002": NEW})
    floor = SPEC.threshold("min_count")
    hot = [
        k for k, s in enumerate(scrapes) if sum(n for x, n in s.items() if x in watched) >= floor
    ]
    window_scrapes = SPEC.threshold("window_seconds") / STEP
    bursts = sum(1 for i, k in enumerate(hot) if i == 0 or k - hot[i - 1] > window_scrapes)
    assert len(found) == bursts
    assert all(a.severity is Severity.MEDIUM and a.gpu == 3 for a in found)
