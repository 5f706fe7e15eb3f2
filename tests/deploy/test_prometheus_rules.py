"""The shipped Prometheus rules: promtool checks them and runs their unit tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.promql_names import known_names, metric_names

pytestmark = pytest.mark.prometheus

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "hpcscope-rules.yml"
#: every shipped rule file and its unit tests (``<name>.yml`` next to ``<name>.test.yml``)
RULE_FILES = sorted(p for p in DEPLOY.glob("*.yml") if not p.name.endswith(".test.yml"))
METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
#: Rule files Debian's vmalert (1.79) refuses, and why (a site on VictoriaMetrics cannot load
#: them as they are; the dashboards do not read them).
VMALERT_REFUSES: dict[str, str] = {}


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found: install Debian's prometheus (scripts/install-system-deps.sh)"
        )
    return path


def test_every_rule_file_has_its_unit_tests() -> None:
    assert len(RULE_FILES) >= 2
    for rules in RULE_FILES:
        assert rules.with_suffix(".test.yml").is_file(), rules.name


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(rules: Path) -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(rules: Path) -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", rules.with_suffix(".test.yml").name],
        capture_output=True,
        text=True,
        cwd=DEPLOY,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_follow_the_conventions() -> None:
    groups = [g for rules in RULE_FILES for g in yaml.safe_load(rules.read_text())["groups"]]
    exported = set(re.findall(r"`(hpcscope_[a-z_]+)`", METRICS_DOC.read_text()))
    alerts = 0
    for group in groups:
        for rule in group["rules"]:
            used = set(re.findall(r"\bhpcscope_[a-z_]+", rule["expr"]))
            assert used <= exported, f"{rule}: unknown families {used - exported}"
            if "record" in rule:
                # level:metric:operations; the metric keeps its exporter's name (DCGM_FI_...)
                record = rule["record"]
                assert re.fullmatch(r"[a-z_]+:[A-Za-z_]+:[a-z0-9_]+", record), record
            else:
                alerts += 1
                assert rule["alert"].startswith("Hpcscope")
                assert rule["labels"]["severity"] in {"info", "warning", "critical"}
                assert rule["annotations"]["runbook_url"]
                assert rule["annotations"]["summary"]
    assert alerts >= 4


def test_rules_read_only_series_that_exist() -> None:
    """Every series a shipped rule reads is exported by the twin's exporters (with hpcscope's
    dcgm-exporter counters), by hpcscope's /metrics, or recorded by a shipped rule."""
    known = known_names()
    for rules in RULE_FILES:
        for group in yaml.safe_load(rules.read_text())["groups"]:
            for rule in group["rules"]:
                read = metric_names(rule["expr"])
                assert read, rule["expr"]
                assert read <= known, f"{rules.name}: {rule['expr']}: unknown {read - known}"


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_vmalert_accepts_the_rules(rules: Path) -> None:
    """VictoriaMetrics sites evaluate the rules with vmalert (Debian's, 1.79): it parses them
    as MetricsQL and checks their templates; the files it refuses are listed, with why."""
    binary = shutil.which("vmalert")
    if binary is None:
        pytest.fail("vmalert not found: install Debian's victoria-metrics (make system-deps)")
    result = subprocess.run(
        [binary, "-dryRun", f"-rule={rules}", "-loggerLevel=ERROR"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    refused = VMALERT_REFUSES.get(rules.name)
    if refused is None:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode != 0 and refused.split()[0] in result.stdout + result.stderr
