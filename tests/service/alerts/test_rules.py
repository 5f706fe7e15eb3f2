"""Rule files: the bundled ones load; mistakes are named by file and line at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcscope.analysis.registry import registry
from hpcscope.model.alerts import Severity
from hpcscope.service.alerts.rules import (
    RuleFileError,
    bundled_rules_dir,
    load_rule_file,
    load_rules,
    load_site_rules,
    rules_with_datasets,
)
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings

GOOD = """\
rules:
  - id: GI-3
    vector: 4
    severity: CRITICAL
    title: liar
    thresholds: {relative_error: 1.0e-3, attribution_cosine: 0.9}
"""


def test_bundled_rules_load_with_the_reference_thresholds() -> None:
    rules = load_site_rules(None)
    assert set(rules) == {r.rule_id for r in registry().in_rule_files()}
    assert set(rules) >= {"GI-1", "GI-2", "GI-3", "GI-4", "GI-ATTR"}
    gi1 = rules["GI-1"]
    assert (gi1.severity, gi1.window_steps, gi1.min_hits) == (Severity.HIGH, 10, 3)
    assert gi1.threshold("norm_z") == 6.0 and gi1.threshold("cosine_z") == 6.0
    assert (rules["GI-2"].window_steps, rules["GI-2"].min_hits) == (50, 20)
    assert rules["GI-3"].threshold("relative_error") == 1e-3
    assert rules["GI-3"].severity is Severity.CRITICAL
    assert gi1.source.endswith("gradient-integrity.yaml") and gi1.line == 8
    assert bundled_rules_dir().name == "rules"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("vector: 4", "vector: 9"), ":3: rules.0.vector: Input should be less"),
        (GOOD.replace("CRITICAL", "HUGE"), ":4: rules.0.severity: Value error, unknown severity"),
        (GOOD.replace(", attribution_cosine: 0.9", ""), ":6: rules.0.thresholds: rule GI-3 needs"),
        (GOOD + "    colour: red\n", ":7: rules.0.colour: Extra inputs are not permitted"),
        (GOOD + GOOD[len("rules:\n") :], ":7: rule GI-3 appears twice"),
        (GOOD.replace("title: liar", "title: liar\n    window_steps: 1\n    min_hits: 3"),
         ":7: rules.0.min_hits: rule GI-3: min_hits 3 > window_steps 1"),
        ("rules: [\n", ":2: not YAML"),
    ],
)  # fmt: skip
def test_mistakes_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(RuleFileError) as info:
        load_rule_file(path)
    assert info.value.describe().startswith(str(path) + message), info.value.describe()


def test_one_rule_in_two_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleFileError, match=r"b\.yaml:2: rule GI-3 is also defined in .*a\.yaml:2"):
        load_rules(tmp_path)


def test_a_bad_rule_file_stops_the_service_at_start(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(GOOD.replace("vector: 4", "vector: x"))
    settings = Settings(store_path=tmp_path / "s.duckdb", rules_dir=tmp_path)
    with pytest.raises(RuleFileError, match=r"site\.yaml:3"):
        Service.open(settings)


EVENT = """\
rules:
  - id: SC-2
    vector: 1
    severity: HIGH
    title: temp exec
    falco_rules: [Drop and execute new binary in container]
    thresholds: {connect_window_seconds: 60}
    lists:
      temp_prefixes: [/tmp/]
      temp_substrings: []
      known_temp_substrings: []
"""


def test_event_rules_load_their_lists_and_falco_names(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(EVENT)
    (spec,) = load_rule_file(path)
    assert spec.items("temp_prefixes") == ("/tmp/",) and spec.items("missing") == ()
    assert spec.falco_rules == ("Drop and execute new binary in container",)
    bundled = load_site_rules(None)
    assert bundled["SC-3"].items("miner_ports")[:2] == ("3333", "4444")
    assert bundled["SC-2"].threshold("connect_window_seconds") == 60


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (EVENT.replace("      known_temp_substrings: []\n", ""),
         ":8: rules.0.lists: rule SC-2 needs lists known_temp_substrings"),
        (EVENT.replace("temp_substrings: []", "temp_substrings: [{a: 1}]"),
         ":10: rules.0.lists.temp_substrings.0.str: Input should be a valid string"),
        (EVENT.replace("[Drop and execute new binary in container]", "Drop"),
         ":6: rules.0.falco_rules: Input should be a valid list"),
    ],
)  # fmt: skip
def test_event_rule_mistakes_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(RuleFileError) as info:
        load_rule_file(path)
    assert info.value.describe().startswith(str(path) + message), info.value.describe()


def test_a_cidr_that_does_not_parse_is_named_with_its_rule(tmp_path: Path) -> None:
    text = (bundled_rules_dir() / "security-events.yaml").read_text()
    (tmp_path / "events.yaml").write_text(text.replace("10.0.0.0/8", "10.0.0.0/33"))
    with pytest.raises(RuleFileError) as info:
        load_site_rules(tmp_path)
    line = text[: text.index("- id: SC-3")].count("\n") + 1
    assert info.value.describe().startswith(f"{tmp_path / 'events.yaml'}:{line}: ")
    assert "'10.0.0.0/33' is not an address or CIDR" in info.value.describe()


def test_a_dataset_registry_written_into_a_copy_of_the_bundled_rules(tmp_path: Path) -> None:
    """What the demo runs with: the bundled rules, DP-1's ``datasets`` (read by DP-2 and DP-4)
    filled; the bundled directory itself untouched."""
    entry = "/lustre/scratch/datasets vision scratch-OST0006,scratch-OST0007"
    directory = rules_with_datasets(tmp_path / "rules", [entry])
    rules = load_site_rules(directory)
    assert rules["DP-1"].items("datasets") == (entry,)
    assert load_site_rules(None)["DP-1"].items("datasets") == ()
    assert set(rules) == set(load_site_rules(None))
    assert (directory / "falco" / "meaning.yaml").is_file()
    again = rules_with_datasets(directory, [])  # a fresh copy each time: nothing left over
    assert load_site_rules(again)["DP-1"].items("datasets") == ()
