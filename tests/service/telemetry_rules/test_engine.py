"""The telemetry rules in the service: the twin's scenarios through parsers, spools, a real
DuckDB store and the engine; re-runs count new firings only; bad rule lists are named."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import RuleSpec, Severity
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.service.alerts.rules import RuleFileError, load_site_rules
from hpcscope.service.telemetry_rules.engine import TelemetryRules
from hpcscope.store import Store
from hpcscope.store import telemetry_rules as queries
from hpcscope.store.alerts import alerts
from hpcscope.twin import attacks_node_facts, attacks_telemetry, benign_telemetry
from hpcscope.twin.attacks import Scenario
from hpcscope.twin.telemetry_traces import SECOND_NS
from tests.support.telemetry_replay import detection_delays, replay, with_lists

T0 = 1_796_126_400 * SECOND_NS


@pytest.fixture(scope="module")
def rules() -> dict[str, RuleSpec]:
    return load_site_rules(None)


@pytest.mark.parametrize(
    "make",
    [
        attacks_telemetry.pkey_probing,
        attacks_telemetry.counter_reset,
        attacks_telemetry.busy_gpu_without_job,
        attacks_telemetry.orphan_after_epilog,
        attacks_telemetry.foreign_process,
        attacks_telemetry.manifest_overwrite,
        attacks_telemetry.foreign_rename,
        benign_telemetry.benign_gpu_lifecycle,
        benign_telemetry.benign_maintenance_reset,
        benign_telemetry.benign_curation,
        attacks_node_facts.xid_burst_new_job,
        attacks_node_facts.xid_burst_unknown_binary,
        attacks_node_facts.benign_xid_bug_established_job,
        attacks_node_facts.posture_old_runc,
        attacks_node_facts.posture_unhashed_dataset,
        attacks_node_facts.benign_patched_node,
    ],
)
def test_scenarios_through_the_pipeline(
    make: object, rules: dict[str, RuleSpec], tmp_path: Path
) -> None:
    s: Scenario = make(T0)  # type: ignore[operator]
    store, cycle = replay(s, tmp_path, rules)
    try:
        found = alerts(store, JobScope(all_jobs=True))
        assert dict(Counter(a.rule_id for a in found)) == s.expected
        assert cycle.alerts == len(found)
        for alert in found:
            assert (alert.node, alert.job_id, alert.gpu) == (s.node, s.job_id, s.gpu)
            assert alert.evidence and alert.evidence[0].summary
        for rule, severity in s.severities.items():
            assert max(a.severity for a in found if a.rule_id == rule) is Severity[severity]
    finally:
        store.close()


def test_spools_store_each_record_once(rules: dict[str, RuleSpec], tmp_path: Path) -> None:
    s = attacks_telemetry.foreign_process(T0)
    store, _ = replay(s, tmp_path, rules)
    try:
        processes = queries.gpu_processes(store)
        assert processes.num_rows == 24 * 8 + 5  # 24 reads of 8 trainers, the intruder 5 times
        intruder = [r for r in processes.to_pylist() if r["pid"] == 4242]
        assert {(r["gpu"], r["job_id"]) for r in intruder} == {(1, "4410002")}
    finally:
        store.close()


def test_rerun_counts_only_new_firings(rules: dict[str, RuleSpec], tmp_path: Path) -> None:
    s = attacks_telemetry.busy_gpu_without_job(T0)
    store, first = replay(s, tmp_path, rules)
    try:
        assert first.alerts == 1
        engine = TelemetryRules(store, rules)
        at = from_epoch_seconds(s.evaluate_at_ns / SECOND_NS)  # type: ignore[operator]
        assert engine.evaluate_once(now=at).alerts == 1  # a new engine: the episode again
        assert engine.evaluate_once(now=at + timedelta(seconds=15)).alerts == 0  # nothing new
        stored = alerts(store, JobScope(all_jobs=True))
        assert [(a.rule_id, a.count) for a in stored] == [("SC-4", 2)]
        assert engine.after_cycle() is not None  # the collector's hook, on the wall clock
    finally:
        store.close()


def test_after_cycle_never_raises(rules: dict[str, RuleSpec], tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    engine = TelemetryRules(store, rules)
    store.close()
    assert engine.after_cycle() is None  # a closed store: logged, collection goes on


def test_after_cycle_runs_the_rules_once_per_interval(
    rules: dict[str, RuleSpec], tmp_path: Path
) -> None:
    """The collector's hook evaluates at most once per ``every_seconds`` of its clock: a
    cycle in between gets the last run's figures, the first cycle past it a new run."""
    clock = [from_epoch_seconds(T0 / SECOND_NS)]
    store = Store(tmp_path / "s.duckdb")
    try:
        engine = TelemetryRules(store, rules, now=lambda: clock[0], every_seconds=15.0)
        first = engine.after_cycle()
        assert first is not None and first.at == clock[0]
        clock[0] += timedelta(seconds=14)
        assert engine.after_cycle() is first
        clock[0] += timedelta(seconds=2)
        again = engine.after_cycle()
        assert again is not None and again is not first and again.at == clock[0]
        every = TelemetryRules(store, rules, now=lambda: clock[0])  # 0: every cycle
        one = every.after_cycle()
        assert every.after_cycle() is not one
    finally:
        store.close()


def test_bad_window_in_a_rule_file_is_named(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[3] / "deploy" / "rules" /
            "security-telemetry.yaml").read_text()  # fmt: skip
    (tmp_path / "t.yaml").write_text(
        text.replace("maintenance_windows: []", 'maintenance_windows: ["gpu* yesterday today"]')
    )
    with pytest.raises(RuleFileError) as err:
        load_site_rules(tmp_path)
    assert "RD-6" in str(err.value) and "t.yaml" in str(err.value)
    assert err.value.line is not None


def test_a_gm4_xid_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[3] / "deploy" / "rules" /
            "security-telemetry.yaml").read_text()  # fmt: skip
    (tmp_path / "t.yaml").write_text(text.replace("xids: [13, 31, 43]", 'xids: [13, "x31"]'))
    with pytest.raises(RuleFileError) as err:
        load_site_rules(tmp_path)
    assert "GM-4: Xid 'x31' is not a number" in str(err.value) and "t.yaml" in str(err.value)


def test_with_lists_replaces_only_the_named_lists(rules: dict[str, RuleSpec]) -> None:
    changed = with_lists(rules, {"DP-1": {"datasets": ["/d vision OST1"]}})
    assert changed["DP-1"].items("datasets") == ("/d vision OST1",)
    assert changed["DP-1"].items("write_types") == rules["DP-1"].items("write_types")


def test_shipped_thresholds_are_the_reference_starting_values(rules: dict[str, RuleSpec]) -> None:
    assert rules["RD-1"].threshold("floor_bytes_per_second") == 50e6
    assert rules["RD-1"].threshold("idle_factor") == 10
    assert rules["RD-2"].threshold("floor_bytes_per_second") == 100e6
    assert rules["RD-2"].threshold("consecutive_scrapes") == 3
    assert rules["RD-2b"].threshold("integral_bytes") == 50e9
    assert rules["RD-3"].threshold("ratio_to_median") == 1.5
    assert rules["RD-7"].threshold("correlation") == 0.9
    assert rules["SC-4"].threshold("min_seconds") == 120
    assert rules["GM-1"].threshold("fb_used_bytes") == 1024 * 2**20
    assert (rules["SC-4"].severity, rules["GM-2"].severity) == (Severity.CRITICAL,) * 2
    assert rules["GM-4"].threshold("min_count") == 20  # "e.g. >= 20 in 2 min"
    assert rules["GM-4"].threshold("window_seconds") == 120
    assert rules["GM-4"].items("xids") == ("13", "31", "43")


def test_telemetry_alerts_are_scoped_like_every_alert(
    rules: dict[str, RuleSpec], tmp_path: Path
) -> None:
    """G3: a researcher sees alerts on their own jobs, a coordinator their account's, alerts on
    no job (an idle node's RD-1/RD-6, SC-4) are the admins' only."""
    store, _ = replay(attacks_telemetry.foreign_process(T0), tmp_path / "a", rules)
    idle, _ = replay(attacks_telemetry.counter_reset(T0), tmp_path / "b", rules)
    try:
        bob = JobScope(all_jobs=False, users=frozenset({"bob"}))
        alice = JobScope(all_jobs=False, users=frozenset({"alice"}))
        nlp = JobScope(all_jobs=False, accounts=frozenset({"nlp"}))
        assert [a.rule_id for a in alerts(store, bob)] == ["GM-2"]
        assert [a.rule_id for a in alerts(store, nlp)] == ["GM-2"]
        assert alerts(store, alice) == []
        assert alerts(idle, bob) == [] and alerts(idle, alice) == []
        assert [a.rule_id for a in alerts(idle, JobScope(all_jobs=True))] == ["RD-6"]
    finally:
        store.close()
        idle.close()


@pytest.mark.parametrize(
    ("make", "targets"),
    [
        (attacks_telemetry.idle_node_exfiltration, {"RD-1": 90}),
        (attacks_telemetry.dp_node_over_median, {"RD-2": 45, "RD-3": 150}),
        (attacks_telemetry.busy_gpu_without_job, {"SC-4": 150}),
        (attacks_telemetry.memory_after_epilog, {"GM-1": 75}),
    ],
)
def test_detection_delays_meet_the_reference_targets(
    make: object, targets: dict[str, float], rules: dict[str, RuleSpec], tmp_path: Path
) -> None:
    """security.md §9: MTTD <= window + 2 scrapes (RD-1 90 s, RD-2 45 s, RD-3 150 s, GM-1 75 s,
    SC-4 150 s), one run after every 15 s collector cycle."""
    s: Scenario = make(T0)  # type: ignore[operator]
    store, _ = replay(s, tmp_path, rules)
    try:
        delays = detection_delays(store, s, rules)
    finally:
        store.close()
    assert set(delays) == set(targets)
    for rule, target in targets.items():
        delay = delays[rule]
        assert delay is not None and 0 < delay <= target, (rule, delay)
