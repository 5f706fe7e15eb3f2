"""The rule registry is the one list of rules: the rule files, the docs and the alerts the
code can raise name exactly its rules; engines evaluate what is registered, nothing else."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
import yaml

from hpcscope.analysis.alerts.common import JobOwner, event_time
from hpcscope.analysis.alerts.events import EventRules, event_rule
from hpcscope.analysis.alerts.posture import NodePosture, evaluate_posture, posture_rule
from hpcscope.analysis.registry import Rule, RuleKind, RuleRegistry, declared_in, registry
from hpcscope.analysis.telemetry_rules.rules import TelemetryInputs, evaluate, telemetry_rule
from hpcscope.model.alerts import Alert, RuleSpec, Severity, Vector
from hpcscope.model.rules import RULE_ID_PATTERN
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA, TETRAGON_EVENT_SCHEMA, TetragonRow
from hpcscope.service.alerts import reference
from hpcscope.service.alerts.rules import RuleFileError, bundled_rules_dir, load_rule_file
from hpcscope.service.settings import REPO_ROOT

SRC = REPO_ROOT / "src" / "hpcscope"
DOCS = [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]
T = datetime(2026, 12, 1, 12)


def _yaml_entries() -> dict[str, tuple[int, Path]]:
    found: dict[str, tuple[int, Path]] = {}
    for path in sorted(bundled_rules_dir().glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text())["rules"]:
            found[entry["id"]] = (entry["vector"], path)
    return found


def test_the_rule_files_hold_exactly_the_registered_rules_with_their_vectors() -> None:
    entries = _yaml_entries()
    declared = {r.rule_id: r for r in registry().in_rule_files()}
    assert sorted(entries) == sorted(declared)
    assert {k: v for k, (v, _) in entries.items()} == {
        k: int(r.vector) for k, r in declared.items()
    }
    set_in_code = {r.rule_id for r in registry() if not r.in_rule_file}
    assert set_in_code == {"OPS-1", "SLO-PAGE", "SLO-TICKET"}


def _families() -> set[str]:
    return {rule_id.split("-")[0] for rule_id in registry().ids()}


#: Rules ``docs/security.md`` describes whose evaluators are being written (their Tetragon
#: policies ship already); each leaves this set when it is registered (the test says so).
BEING_WRITTEN: set[str] = set()


def test_the_docs_name_only_registered_rules_and_every_one() -> None:
    token = re.compile(rf"\b(?:{'|'.join(sorted(_families()))})-[A-Z0-9]{{1,6}}[a-z]?\b")
    mentioned = {m for path in DOCS for m in token.findall(path.read_text(encoding="utf-8"))}
    assert BEING_WRITTEN & set(registry().ids()) == set(), "registered now: drop from the set"
    assert mentioned - set(registry().ids()) - BEING_WRITTEN == set()
    generated = (REPO_ROOT / reference.REFERENCE).read_text(encoding="utf-8")
    assert generated == reference.render(), f"docs/rules.md is stale: {reference.REGENERATE}"
    listed = {m.strip("`") for m in re.findall(r"^\| `([^`]+)` \|", generated, re.M)}
    assert listed == set(registry().ids())


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_the_alerts_the_code_can_raise_are_the_registered_rules() -> None:
    pattern = re.compile(RULE_ID_PATTERN)
    literals = {
        value: path
        for path in sorted(SRC.rglob("*.py"))
        for value in _string_constants(path)
        if pattern.match(value)
    }
    unknown = {k: str(v.relative_to(SRC)) for k, v in literals.items() if k not in registry()}
    assert unknown == {}, "rule ids in the code that no evaluator declares"
    for rule in registry():
        module = rule.evaluator.__module__
        assert module.startswith("hpcscope.analysis."), f"{rule.rule_id}: evaluator in {module}"
        source = SRC.joinpath(*module.split(".")[1:]).with_suffix(".py")
        assert rule.rule_id in _string_constants(source), f"{rule.rule_id} not in {source}"


def test_rules_are_declared_beside_their_evaluators() -> None:
    for module, rules in declared_in("hpcscope.analysis"):
        for rule in rules:
            assert rule.evaluator.__module__.rsplit(".", 1)[0] == module.rsplit(".", 1)[0], (
                f"{rule.rule_id} is declared in {module}, its evaluator is {rule.evaluator_name}"
            )


def test_one_id_declared_twice_is_refused() -> None:
    rule = registry().get("SC-1")
    assert rule is not None
    with pytest.raises(ValueError, match=r"rule SC-1 declared twice: by .*TetragonRules"):
        RuleRegistry((rule, rule))
    with pytest.raises(ValueError, match="does not match"):
        Rule("sc1", Vector.SUPPLY_CHAIN, RuleKind.EVENT, EventRules)
    with pytest.raises(ValueError, match="severity and title"):
        Rule("OPS-9", Vector.SERVICE_LEVEL, RuleKind.HEALTH, EventRules, in_rule_file=False)


ENTRY = "rules:\n  - id: {id}\n    vector: {vector}\n    severity: HIGH\n    title: t\n"


@pytest.mark.parametrize(
    ("rule_id", "vector", "message"),
    [
        ("XX-1", 1, ":2: rules.0.id: rule XX-1 is not a declared rule (declared: "),
        ("OPS-1", 1, ":2: rules.0.id: rule OPS-1 is set in code, not in a rule file"),
        ("W-3", 4, ":3: rules.0.vector: rule W-3 is of vector 2 (data_poisoning), not 4"),
    ],
)
def test_a_rule_file_entry_must_be_a_registered_rule(
    tmp_path: Path, rule_id: str, vector: int, message: str
) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(ENTRY.format(id=rule_id, vector=vector))
    with pytest.raises(RuleFileError) as info:
        load_rule_file(path)
    assert info.value.describe().startswith(str(path) + message), info.value.describe()


# ------------------------------------------------------------- engines take what is registered


class _ShellsOnNodes:
    """A Tetragon evaluator the engines have never heard of: any exec of ``/bin/sh``."""

    def __init__(
        self,
        rules: Mapping[str, RuleSpec],
        *,
        checkpoint_roots: tuple[str, ...],
        dataset_roots: tuple[str, ...],
    ):
        self.spec = rules.get("ZZ-1")

    def evaluate(self, rows: list[TetragonRow], *, owners: Mapping[str, JobOwner]) -> list[Alert]:
        spec = self.spec
        if spec is None:
            return []
        return [
            Alert(spec.rule_id, spec.vector, spec.severity, spec.title, event_time(r),
                  event_time(r), node=r["node_name"], subject=r["binary"])
            for r in rows
            if r["binary"] == "/bin/sh"
        ]  # fmt: skip


SPEC = RuleSpec("ZZ-1", Vector.SUPPLY_CHAIN, Severity.HIGH, "a shell")


def test_the_event_engine_runs_every_registered_evaluator() -> None:
    row = dict.fromkeys(TETRAGON_EVENT_SCHEMA.names)
    row |= {"ts": T, "event_type": "process_exec", "binary": "/bin/sh", "node_name": "n1",
            "source_name": "t.log", "source_line": 1}  # fmt: skip
    tetragon = pa.Table.from_pylist([row], schema=TETRAGON_EVENT_SCHEMA)
    falco = FALCO_ALERT_SCHEMA.empty_table()
    extra = event_rule("ZZ-1", Vector.SUPPLY_CHAIN, _ShellsOnNodes)
    engine = EventRules(
        {"ZZ-1": SPEC}, checkpoint_roots=(), registered=(*registry().of_kind(RuleKind.EVENT), extra)
    )
    (alert,) = engine.evaluate(falco, tetragon, owners={}).alerts
    assert (alert.rule_id, alert.node, alert.subject) == ("ZZ-1", "n1", "/bin/sh")
    unknown = EventRules({"ZZ-1": SPEC}, checkpoint_roots=())
    assert unknown.evaluate(falco, tetragon, owners={}).alerts == []


def test_the_telemetry_and_posture_engines_run_every_registered_evaluator() -> None:
    def busy(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
        spec = rules["ZZ-1"]
        return [Alert(spec.rule_id, spec.vector, spec.severity, spec.title, T, T, gpu=g)
                for g in inputs.gpu_samples["gpu"]]  # fmt: skip

    inputs = TelemetryInputs(gpu_samples=pl.DataFrame({"gpu": [3]}))
    extra = telemetry_rule("ZZ-1", Vector.SUPPLY_CHAIN, busy)
    (alert,) = evaluate(inputs, {"ZZ-1": SPEC}, registered=[extra])
    assert (alert.rule_id, alert.gpu) == ("ZZ-1", 3)

    def flagged(posture: NodePosture, rules: Mapping[str, RuleSpec]) -> list[Alert]:
        spec = rules["ZZ-1"]
        return [
            Alert(spec.rule_id, spec.vector, spec.severity, spec.title, T, T, node=posture.node)
        ]

    node = NodePosture("n1", T)
    registered = (
        *registry().of_kind(RuleKind.POSTURE),
        posture_rule("ZZ-1", Vector.SUPPLY_CHAIN, flagged),
    )
    assert [a.rule_id for a in evaluate_posture(node, {"ZZ-1": SPEC}, registered=registered)] == [
        "ZZ-1"
    ]
