"""deploy/falco: the rules file against Falco's rules-file format, and what hpcscope parses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcscope.ingest.security.falco import FALCO_FIELD_COLUMNS
from hpcscope.model.security_events import FALCO_PRIORITIES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "falco"
RULES = DEPLOY / "hpcscope_rules.yaml"

ITEM_KINDS = {"rule", "macro", "list", "required_engine_version", "required_plugin_versions"}
RULE_KEYS = {
    "rule", "desc", "condition", "output", "priority", "tags", "enabled", "exceptions",
    "source", "append", "override", "warn_evttypes", "skip-if-unknown-filter",
}  # fmt: skip
MACRO_KEYS = {"macro", "condition", "append", "override"}
LIST_KEYS = {"list", "items", "append", "override"}
# Macros of Falco's default falco_rules.yaml that these rules use.
FALCO_DEFAULT_MACROS = {"spawned_process", "open_read", "open_write"}
# Falco fields the conditions use (Falco's "Supported Fields" reference).
FALCO_FIELDS = {
    "evt.type", "evt.dir", "evt.arg.request", "evt.arg.pid", "proc.name", "proc.aname",
    "proc.pname", "proc.exepath", "proc.args", "proc.cmdline", "proc.is_exe_from_memfd",
    "fd.name", "user.uid", "thread.cgroups", "proc.env",
}  # fmt: skip
OPERATORS = {
    "and", "or", "not", "in", "startswith", "endswith", "contains", "icontains", "pmatch",
    "glob", "exists", "intersects", "regex", "bcontains", "bstartswith", "true", "false",
}  # fmt: skip
HPCSCOPE_RULE_IDS = {"SC-1", "SC-2", "CE-1", "CE-2", "CE-3", "CE-4", "GM-3", "RD-4"}


def _items() -> list[dict[str, Any]]:
    items = yaml.safe_load(RULES.read_text())
    assert isinstance(items, list)
    return items


def _kind(item: dict[str, Any]) -> str:
    kinds = ITEM_KINDS & set(item)
    assert len(kinds) == 1, item
    return kinds.pop()


def _names(kind: str) -> set[str]:
    return {item[kind] for item in _items() if kind in item}


def test_items_have_known_kinds_and_keys() -> None:
    allowed = {"rule": RULE_KEYS, "macro": MACRO_KEYS, "list": LIST_KEYS}
    for item in _items():
        kind = _kind(item)
        if kind in allowed:
            assert set(item) <= allowed[kind], (item[kind], set(item) - allowed[kind])
    assert _items()[0] == {"required_engine_version": "0.31.0"}


def test_rules_are_complete_and_tagged() -> None:
    rules = [item for item in _items() if "rule" in item]
    seen: set[str] = set()
    for rule in rules:
        assert {"rule", "desc", "condition", "output", "priority"} <= set(rule), rule["rule"]
        assert rule["priority"].lower() in FALCO_PRIORITIES
        tags = rule["tags"]
        ids = HPCSCOPE_RULE_IDS & set(tags)
        assert "hpcscope" in tags and len(ids) == 1, rule["rule"]
        assert any(re.fullmatch(r"T\d{4}(\.\d{3})?", tag) for tag in tags), rule["rule"]
        assert any(tag.startswith("mitre_") for tag in tags), rule["rule"]
        seen |= ids
    assert seen == HPCSCOPE_RULE_IDS
    assert len({rule["rule"] for rule in rules}) == len(rules)


def _references(condition: str) -> tuple[set[str], set[str], set[str]]:
    """(macros, lists, fields) a condition refers to."""
    text = re.sub(r'"[^"]*"', '""', condition)
    lists: set[str] = set()
    for group in re.findall(r"\b(?:in|pmatch|intersects)\s*\(([^)]*)\)", text):
        lists |= {item.strip() for item in group.split(",") if item.strip().startswith("hpcscope_")}
    text = re.sub(r"\b(in|pmatch|intersects)\s*\([^)]*\)", " ", text)
    fields = set(re.findall(r"[a-z]+(?:\.[a-z_]+)+", text))
    text = re.sub(r"[a-z]+(?:\.[a-z_]+)+", " ", text)
    text = re.sub(r"(=|!=|<=|>=|startswith|endswith|contains|icontains|glob)\s+\S+", " ", text)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - OPERATORS
    return words, lists, fields


def test_every_reference_is_defined() -> None:
    macros, lists = _names("macro"), _names("list")
    for item in _items():
        if "condition" not in item:
            continue
        used_macros, used_lists, fields = _references(item["condition"])
        name = item.get("rule") or item.get("macro")
        assert used_macros <= macros | FALCO_DEFAULT_MACROS, (name, used_macros - macros)
        assert used_lists <= lists, (name, used_lists - lists)
        assert fields <= FALCO_FIELDS, (name, fields - FALCO_FIELDS)


def test_reference_check_catches_undefined_names() -> None:
    used_macros, used_lists, fields = _references(
        "spawned_process and hpcscope_nope and proc.name in (hpcscope_missing, sh) "
        'and fd.name startswith "/tmp and x" and prc.nme = 1'
    )
    assert used_macros == {"spawned_process", "hpcscope_nope"}
    assert used_lists == {"hpcscope_missing"}
    assert fields == {"proc.name", "fd.name", "prc.nme"}


def test_outputs_name_the_job_cgroups_and_only_parsed_fields() -> None:
    for rule in (item for item in _items() if "rule" in item):
        fields = set(re.findall(r"%([a-z]+(?:\.[a-z_]+)+)", rule["output"]))
        assert "thread.cgroups" in fields, rule["rule"]
        assert fields <= set(FALCO_FIELD_COLUMNS), (rule["rule"], fields - set(FALCO_FIELD_COLUMNS))


def test_slurm_job_macro_matches_the_layouts() -> None:
    [macro] = [item for item in _items() if item.get("macro") == "hpcscope_slurm_job"]
    needles = re.findall(r'contains "([^"]+)"', macro["condition"])
    assert needles == ["/job_", "slurmstepd.scope/s", "slurmstepd.scope/system"]

    def matches(cgroups: str) -> bool:
        return needles[0] in cgroups or (needles[1] in cgroups and needles[2] not in cgroups)

    assert matches("cpuset=/slurm/uid_1000/job_5/step_0/task_0")
    assert matches("cpu=/system.slice/slurmstepd.scope/job_5/step_0/user/task_0")
    assert matches("cpu=/system.slice/gpu01_slurmstepd.scope/sEKNKTV3WPV500/step_0/user")
    assert not matches("cpu=/system.slice/slurmstepd.scope/system")
    assert not matches("cpu=/user.slice/user-1000.slice/session-3.scope")


@pytest.mark.parametrize("name", ["falco-hpcscope.yaml"])
def test_falco_config_appends_thread_cgroups(name: str) -> None:
    config = yaml.safe_load((DEPLOY / name).read_text())
    assert config["json_output"] is True
    assert config["json_include_tags_property"] is True
    [append] = config["append_output"]
    assert append["match"] == {"source": "syscall"}
    assert append["extra_fields"] == ["thread.cgroups"]
    assert config["http_output"]["url"].split("?")[0].endswith("/api/ingest/falco")


def test_conditions_are_balanced() -> None:
    for item in _items():
        condition = item.get("condition")
        if condition is None:
            continue
        assert condition.count('"') % 2 == 0, condition
        depth = 0
        for char in re.sub(r'"[^"]*"', '""', condition):
            depth += {"(": 1, ")": -1}.get(char, 0)
            assert depth >= 0, condition
        assert depth == 0, condition


def test_the_alert_engine_takes_over_every_shipped_falco_rule() -> None:
    """Each shipped rule's alerts reach the engine's rule of the same id (its tag), and the
    engine's rule file lists its name, so a site that drops the tags still maps them."""
    from hpcscope.service.alerts.rules import load_site_rules

    rules = load_site_rules(None)
    for rule in (item for item in _items() if "rule" in item):
        (rule_id,) = HPCSCOPE_RULE_IDS & set(rule["tags"])
        assert rule_id in rules, rule["rule"]
        assert rule["rule"] in rules[rule_id].falco_rules, (rule_id, rule["rule"])
