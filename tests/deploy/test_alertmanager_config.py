"""The shipped Alertmanager routes (``deploy/alertmanager/alertmanager.yml``) pass
``amtool check-config`` and route the label sets hpcscope really sends where the comments say."""

from __future__ import annotations

import subprocess
from datetime import datetime

import pytest

from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.service.notify.alertmanager import alert_labels
from tests.support.notify_servers import amtool_binary
from tests.support.paths import REPO_ROOT

CONFIG = REPO_ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
T = datetime(2026, 12, 1, 12, 0)


def test_amtool_accepts_the_config() -> None:
    done = subprocess.run(
        [amtool_binary(), "check-config", str(CONFIG)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "4 receivers" in done.stdout


@pytest.mark.parametrize(
    ("vector", "severity", "receiver"),
    [
        (Vector.SUPPLY_CHAIN, Severity.CRITICAL, "security-pager"),
        (Vector.GRADIENT_INJECTION, Severity.CRITICAL, "security-pager"),
        (Vector.GRADIENT_INJECTION, Severity.HIGH, "ml-platform"),
        (Vector.DATA_POISONING, Severity.MEDIUM, "ml-platform"),
        (Vector.RDMA, Severity.HIGH, "hpc-security"),
        (Vector.CONTAINER_ESCAPE, Severity.LOW, "hpc-security"),
    ],
)
def test_hpcscope_labels_reach_the_documented_receiver(
    vector: Vector, severity: Severity, receiver: str
) -> None:
    alert = Alert(
        rule_id="X-1",
        vector=vector,
        severity=severity,
        title="t",
        first_seen=T,
        last_seen=T,
        node="gpu01",
        job_id="42",
        user="alice",
        account="vision",
    )
    labels = [f"{k}={v}" for k, v in alert_labels(alert).items()]
    done = subprocess.run(
        [amtool_binary(), "config", "routes", "test", f"--config.file={CONFIG}", *labels],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == receiver
