"""Rule files: the bundled ones load; mistakes are named by file and line at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcscope.analysis.integrity.rules import REQUIRED_THRESHOLDS
from hpcscope.model.alerts import Severity
from hpcscope.service.alerts.rules import (
    RuleFileError,
    bundled_rules_dir,
    load_rule_file,
    load_rules,
    load_site_rules,
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
    assert set(rules) == {"GI-1", "GI-2", "GI-3", "GI-4", "GI-ATTR"}
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
        load_rule_file(path, required_thresholds=REQUIRED_THRESHOLDS)
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
