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
from hpcscope.service.telemetry_rules.replay import replay, with_lists
from hpcscope.store import Store
from hpcscope.store import telemetry_rules as queries
from hpcscope.store.alerts import alerts
from hpcscope.twin import attacks_telemetry, benign_telemetry
from hpcscope.twin.attacks import Scenario
from hpcscope.twin.telemetry_traces import SECOND_NS

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


def test_with_lists_replaces_only_the_named_lists(rules: dict[str, RuleSpec]) -> None:
    changed = with_lists(rules, {"DP-1": {"datasets": ["/d vision OST1"]}})
    assert changed["DP-1"].items("datasets") == ("/d vision OST1",)
    assert changed["DP-1"].items("write_types") == rules["DP-1"].items("write_types")
