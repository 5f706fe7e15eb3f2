"""Event rules over real-format Falco and Tetragon lines: exact per-rule counts, attribution."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.analysis.alerts.events import EventRules
from hpcscope.analysis.registry import RuleKind, registry
from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.model.alerts import Alert, Severity, Vector, merge_alerts
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA
from hpcscope.service.alerts.falco_meaning import load_falco_meaning, meaning_path
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.twin import attacks
from hpcscope.twin.attacks import JOBS, SECOND_NS, Scenario
from hpcscope.twin.security_events import Proc, ProcTree, file_access, tcp_connect, tetragon_exec

T0 = 1_796_126_400 * SECOND_NS  # 2026-12-01T12:00:00Z
RULES = load_site_rules(None)
EVENT_RULE_IDS = registry().ids(RuleKind.EVENT)
OWNERS = {job: JobOwner(user, account) for job, (user, account) in JOBS.items()}

MEANING = load_falco_meaning(meaning_path(None))


def _tables(s: Scenario, proc_root: Path) -> tuple[pa.Table, pa.Table]:
    s.proc.write(proc_root)
    falco = parse_falco_lines([line.encode() for line in s.falco], source=f"{s.name}/falco.json")
    tetragon = parse_tetragon_lines(
        [line.encode() for line in s.tetragon],
        source=f"{s.name}/tetragon.log",
        jobs=ExecJobCache(proc_root=proc_root),
    )
    assert not falco.errors and not tetragon.errors
    return falco.table, tetragon.table


def _replay(s: Scenario, tmp_path: Path) -> list[Alert]:
    falco, tetragon = _tables(s, tmp_path / "proc")
    engine = EventRules(RULES, checkpoint_roots=[attacks.CHECKPOINTS], meaning=MEANING)
    return engine.evaluate(falco, tetragon, owners=OWNERS).alerts


@pytest.mark.parametrize("make", attacks.SCENARIOS, ids=lambda m: m.__name__)
def test_every_scenario_raises_exactly_its_expected_alerts(make: object, tmp_path: Path) -> None:
    s = make(T0)  # type: ignore[operator]
    found = _replay(s, tmp_path)
    counts = Counter(a.rule_id for a in found)
    assert {rule: counts.get(rule, 0) for rule in EVENT_RULE_IDS} == {
        rule: s.expected.get(rule, 0) for rule in EVENT_RULE_IDS
    }  # zeros included
    for rule, severity in s.severities.items():
        assert max(a.severity for a in found if a.rule_id == rule) is Severity[severity]
    for alert in found:
        assert alert.node == s.node and alert.gpu is None
        assert alert.job_id == s.job_id
        if alert.job_id is not None:
            assert (alert.user, alert.account) == JOBS[alert.job_id]
        evidence = alert.evidence[0]
        assert evidence.source.startswith(s.name) and evidence.position is not None
        assert evidence.position.startswith("line ") and "GPU not known" in evidence.summary


def test_the_miner_is_critical_and_attributed_to_alices_job(tmp_path: Path) -> None:
    found = {a.rule_id: a for a in _replay(attacks.supply_chain_miner(T0), tmp_path)}
    miner = found["SC-2"]
    assert miner.severity is Severity.CRITICAL and miner.count == 2  # the exec, then the connect
    assert miner.subject == "/tmp/ultralytics_runner" and miner.vector is Vector.SUPPLY_CHAIN
    assert (miner.job_id, miner.user, miner.account) == ("4410001", "alice", "vision")
    assert miner.evidence[0].position == "line 5"  # the connect, newest first
    assert found["SC-3"].subject == "45.9.148.3:3333"


def test_a_falco_alert_keeps_falcos_rule_name_in_the_evidence(tmp_path: Path) -> None:
    (alert,) = _replay(attacks.falco_miner(T0), tmp_path)
    assert "hpcscope Executable run from a temp directory" in alert.evidence[0].summary
    assert alert.evidence[0].position == "line 1"
    assert (alert.job_id, alert.user, alert.node) == ("4410001", "alice", "gpu01")


def test_sc2_turns_critical_when_the_connect_comes_in_a_later_batch(tmp_path: Path) -> None:
    s = attacks.supply_chain_miner(T0)
    s.proc.write(tmp_path)
    cache = ExecJobCache(proc_root=tmp_path)
    engine = EventRules(RULES, checkpoint_roots=[], meaning=MEANING)
    empty = FALCO_ALERT_SCHEMA.empty_table()
    first = parse_tetragon_lines([x.encode() for x in s.tetragon[:4]], source="t", jobs=cache)
    second = parse_tetragon_lines([s.tetragon[4].encode()], source="t", jobs=cache, first_line=5)
    early = engine.evaluate(empty, first.table, owners=OWNERS).alerts
    late = engine.evaluate(empty, second.table, owners=OWNERS).alerts
    assert {a.rule_id: a.severity for a in early}["SC-2"] is Severity.HIGH
    sc2 = [a for a in late if a.rule_id == "SC-2"]
    assert [a.severity for a in sc2] == [Severity.CRITICAL]
    assert sc2[0].key == next(a.key for a in early if a.rule_id == "SC-2")  # one stored alert


def test_a_connect_after_the_window_is_not_critical(tmp_path: Path) -> None:
    tree = ProcTree()
    miner = tree.add(Proc("gpu01", 5000, 1000, "/tmp/x", "", T0), "4410001")
    lines = [tetragon_exec(miner), tcp_connect(miner, "10.1.0.9", 443, time_ns=T0 + 61 * SECOND_NS)]
    s = Scenario("late", benign=False, tetragon=lines, proc=tree)
    found = _replay(s, tmp_path)
    assert [(a.rule_id, a.severity) for a in found] == [("SC-2", Severity.HIGH)]


def test_checkpoint_creator_is_the_first_writer_and_reads_by_it_are_quiet(tmp_path: Path) -> None:
    tree = ProcTree()
    alice = tree.add(Proc("gpu01", 5100, 1000, "/usr/bin/python3", "", T0), "4410001")
    bob = tree.add(Proc("gpu01", 5101, 1001, "/usr/bin/python3", "", T0), "4410002")
    shard = f"{attacks.CHECKPOINTS}/r/model.pt"
    lines = [
        tetragon_exec(alice),
        tetragon_exec(bob),
        file_access(bob, shard, 4, time_ns=T0 + SECOND_NS),  # before any write: no creator
        file_access(alice, shard, 2, time_ns=T0 + 2 * SECOND_NS),
        file_access(alice, shard, 4, time_ns=T0 + 3 * SECOND_NS),
        file_access(bob, f"{attacks.CHECKPOINTS}/other/model.pt", 4, time_ns=T0 + 4 * SECOND_NS),
    ]
    assert _replay(Scenario("c", benign=True, tetragon=lines, proc=tree), tmp_path) == []


def test_service_accounts_may_read_every_checkpoint(tmp_path: Path) -> None:
    rules = dict(RULES)
    w1 = rules["W-1"]
    rules["W-1"] = replace(w1, lists={"service_accounts": ("nlp",)})
    falco, tetragon = _tables(attacks.foreign_checkpoint_read(T0), tmp_path)
    engine = EventRules(rules, checkpoint_roots=[attacks.CHECKPOINTS], meaning=MEANING)
    assert engine.evaluate(falco, tetragon, owners=OWNERS).alerts == []


def test_a_disabled_rule_stays_quiet(tmp_path: Path) -> None:
    rules = dict(RULES)
    rules["SC-1"] = replace(rules["SC-1"], enabled=False)
    falco, tetragon = _tables(attacks.supply_chain_miner(T0), tmp_path)
    found = EventRules(rules, checkpoint_roots=[], meaning=MEANING).evaluate(
        falco, tetragon, owners=OWNERS
    )
    assert {a.rule_id for a in found.alerts} == {"SC-2", "SC-3"}


def test_falco_rules_are_read_with_their_meaning() -> None:
    """ "Terminal shell in container" (here at the docs' raised Critical priority) is a shell
    in a container: kubectl exec looks the same, so it is supply-chain LOW outside a job and
    never SC-1 without SC-1's Python lineage; with its vector's rule switched off it is
    counted, not raised."""
    sample = Path(__file__).parents[2] / "fixtures/security/falco"
    with (sample / "alert_terminal_shell_falco-website.json").open("rb") as handle:
        parsed = parse_falco_lines(handle, source="sample")
    empty = parsed.table.schema.empty_table()
    engine = EventRules(RULES, checkpoint_roots=[], meaning=MEANING)
    (alert,) = engine.evaluate(parsed.table, empty, owners={}).alerts
    assert (alert.rule_id, alert.severity, alert.job_id) == ("SC-FAL", Severity.LOW, None)
    assert "Terminal shell in container" in alert.evidence[0].summary
    rules = {k: v for k, v in RULES.items() if k != "SC-FAL"}
    verdict = EventRules(rules, checkpoint_roots=[], meaning=MEANING).evaluate(
        parsed.table, empty, owners={}
    )
    assert verdict.alerts == [] and verdict.falco_unmapped == verdict.falco_rows == 1


_AT = datetime(2026, 12, 1, 12)


@given(
    st.lists(
        st.tuples(st.sampled_from(["SC-1", "SC-2"]), st.integers(0, 600), st.integers(1, 4)),
        min_size=1,
        max_size=30,
    ),
    st.randoms(),
)
def test_merging_keeps_every_firing_whatever_the_order(
    firings: list[tuple[str, int, int]], rnd: object
) -> None:
    alerts = [
        Alert(rule, Vector.SUPPLY_CHAIN, Severity(sev), "t",
              _AT + timedelta(seconds=s), _AT + timedelta(seconds=s), job_id="1", subject="x")
        for rule, s, sev in firings
    ]  # fmt: skip
    shuffled = list(alerts)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    merged, again = merge_alerts(alerts), merge_alerts(shuffled)
    assert sum(a.count for a in merged) == len(alerts)
    assert {a.key: (a.count, a.first_seen, a.last_seen, a.severity) for a in merged} == {
        a.key: (a.count, a.first_seen, a.last_seen, a.severity) for a in again
    }
    for alert in merged:
        mine = [a for a in alerts if a.rule_id == alert.rule_id]
        assert alert.severity == max(a.severity for a in mine)


@pytest.mark.parametrize(
    ("make", "rule", "emptied", "fires"),
    [
        (attacks.benign_jit, "SC-1", "jit_toolchain", "SC-1"),
        (attacks.benign_jit, "SC-2", "known_temp_substrings", "SC-2"),
        (attacks.benign_nccl, "SC-3", "cluster_cidrs", "SC-3"),
        (attacks.benign_starts_and_profiling, "CE-3", "container_starters", "CE-3"),
        (attacks.benign_starts_and_profiling, "GM-3", "owner_tools", "GM-3"),
    ],
)
def test_benign_scenarios_are_quiet_because_of_their_allow_lists(
    make: object, rule: str, emptied: str, fires: str, tmp_path: Path
) -> None:
    rules = dict(RULES)
    rules[rule] = replace(rules[rule], lists={**rules[rule].lists, emptied: ()})
    falco, tetragon = _tables(make(T0), tmp_path)  # type: ignore[operator]
    found = EventRules(rules, checkpoint_roots=[attacks.CHECKPOINTS], meaning=MEANING).evaluate(
        falco, tetragon, owners=OWNERS
    )
    assert {a.rule_id for a in found.alerts} == {fires}
