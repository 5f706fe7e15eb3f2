"""Node rules that keep their job logic inside a job: CE-2 (an NVIDIA container hook with a
preloaded library) on the node, in a container or pod, and in a job."""

from __future__ import annotations

import orjson
import pytest

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.model.alerts import Alert, Severity
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA
from tests.support.real_corpus import engine

OWNERS = {"4242": JobOwner("alice", "vision")}


def _exec(
    binary: str, arguments: str, *, pod: bool = False, job: str | None = None, uid: int = 0
) -> bytes:
    process: dict[str, object] = {
        "exec_id": f"{binary} {arguments} {pod} {job}",
        "pid": 2501,
        "uid": uid,
        "binary": binary,
        "arguments": arguments,
        "flags": "execve clone",
        "start_time": "2026-12-01T12:00:00.000000000Z",
    }
    if pod:
        process["pod"] = {
            "namespace": "ml",
            "name": "trainer-0",
            "container": {"id": "containerd://4be1", "name": "trainer"},
        }
    if job is not None:  # hpcscope's sensor resolved the job while the process lived
        process["slurm_job"] = {"job_id": job, "step": "0", "source": "cgroup"}
    line = {
        "process_exec": {"process": process},
        "node_name": "gpu01",
        "time": "2026-12-01T12:00:00.000000000Z",
    }
    return orjson.dumps(line)


def _alerts(line: bytes) -> list[Alert]:
    table = parse_tetragon_lines([line], source="tetragon.log").table
    verdict = engine().evaluate(FALCO_ALERT_SCHEMA.empty_table(), table, owners=OWNERS)
    return verdict.alerts


@pytest.mark.parametrize(
    ("line", "severity"),
    [
        # the hook with the image's LD_PRELOAD, on the host outside any job: NVIDIAScape
        (_exec("/usr/bin/nvidia-ctk", "hook LD_PRELOAD=/proc/self/cwd/poc.so"), "CRITICAL"),
        # through env: the exec Tetragon sees is env's, the hook its argument
        (_exec("/usr/bin/env", "LD_PRELOAD=/tmp/x.so nvidia-container-cli info"), "CRITICAL"),
        # a library path in a pod's container
        (_exec("/usr/bin/nvidia-cdi-hook", "LD_LIBRARY_PATH=/x update", pod=True), "CRITICAL"),
        # a library path set on the bare host (an admin's driver path): HIGH, not CRITICAL
        (_exec("/usr/bin/env", "LD_LIBRARY_PATH=/opt/nv/lib nvidia-container-cli info"), "HIGH"),
    ],
)
def test_ce2_fires_on_the_node_whatever_owns_the_process(line: bytes, severity: str) -> None:
    (alert,) = _alerts(line)
    assert (alert.rule_id, alert.severity.name, alert.node) == ("CE-2", severity, "gpu01")
    assert alert.job_id is None


def test_ce2_in_a_job_keeps_its_severity_and_the_jobs_owner() -> None:
    line = _exec("/usr/bin/env", "LD_LIBRARY_PATH=/scratch/lib nvidia-ctk hook", job="4242")
    (alert,) = _alerts(line)
    assert (alert.rule_id, alert.severity, alert.job_id) == ("CE-2", Severity.CRITICAL, "4242")
    assert (alert.user, alert.account, alert.subject) == ("alice", "vision", "nvidia-ctk")


@pytest.mark.parametrize(
    "line",
    [
        _exec("/usr/bin/nvidia-ctk", "runtime configure --runtime=docker"),
        _exec("/usr/bin/env", "LD_PRELOAD=/usr/lib/libjemalloc.so python train.py", job="4242"),
        _exec("/usr/bin/grep", "LD_PRELOAD= /var/log/nvidia-ctk.log"),
    ],
)
def test_ce2_needs_both_the_hook_and_the_variable(line: bytes) -> None:
    assert [a.rule_id for a in _alerts(line) if a.rule_id == "CE-2"] == []
