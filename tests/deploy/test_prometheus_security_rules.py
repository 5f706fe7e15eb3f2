"""The shipped security alert rules (SC-4, GM-1, RD-1, RD-5, RD-6 in PromQL): promtool checks
them and runs their unit tests; they follow the alert conventions and name rules of the
telemetry rule file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hpcscope.analysis.registry import RuleKind, registry

pytestmark = pytest.mark.prometheus

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "hpcscope-security.yml"
SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found: install Debian's prometheus (scripts/install-system-deps.sh)"
        )
    return path


def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules() -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", "hpcscope-security.test.yml"],
        capture_output=True,
        text=True,
        cwd=DEPLOY,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alerts_name_a_telemetry_rule_and_its_runbook() -> None:
    doc = SECURITY_DOC.read_text()
    seen = set()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                continue
            assert rule["alert"].startswith("Hpcscope")
            assert rule["labels"]["severity"] in {"info", "warning", "critical"}
            rule_id = rule["labels"]["rule_id"]
            assert rule_id in registry().ids(RuleKind.TELEMETRY)
            assert rule["annotations"]["runbook_url"].endswith(f"#{rule_id.lower()}")
            assert f"`{rule['alert']}`" in doc, f"{rule['alert']} is not in docs/security.md"
            seen.add(rule_id)
    assert seen == {"SC-4", "GM-1", "RD-1", "RD-5", "RD-6"}
