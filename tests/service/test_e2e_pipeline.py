"""End to end on loopback: the twin and the server run as real processes.

The twin (``hpcscope twin run``) serves dcgm-exporter pages and slurmrestd, and writes the
job-mapping files; the server (``hpcscope serve``) scrapes it into DuckDB. The assertions read
the server's API only: every figure comes from what was scraped and stored, not from the
twin's internals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.processes import FRESH_VIEWS
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

#: Simulated seconds per real second: the failing job faults within the test. Not faster: at
#: speed 20 the Xid job's last attributed samples (Xid set, before the epilog clears the mapping)
#: span under one scrape under load, and the job was once seen as idle instead of xid_error.
SPEED = 10.0
#: The most the pipeline gets to show every job's verdict; it used to be a fixed 24 s sleep, and
#: settles in about 17 s at speed 10 (the Xid job fails 150 simulated seconds in).
SETTLE_SECONDS = 60.0

#: The verdicts the scenario settles on; the snapshot is taken once they are all visible (or at
#: the deadline, and then the tests below say what is missing).
SETTLED = {
    "llama-7b-pretrain": "straggler",
    "bert-finetune": "busy_not_computing",
    "whisper-train": "healthy",
    "jupyter-debug": "idle",
    "vit-sweep-17": "xid_error",
}


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **FRESH_VIEWS, "PYTHONUNBUFFERED": "1", "HPCSCOPE_LOG_LEVEL": "INFO"}
    with log.open("wb") as handle:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "hpcscope", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _settled(jobs: list[dict[str, Any]]) -> bool:
    verdicts = {job["name"]: job["verdict"] for job in jobs}
    states = {job["name"]: job["state"] for job in jobs}
    return states.get("vit-sweep-17") == "FAILED" and all(
        verdicts.get(name) == verdict for name, verdict in SETTLED.items()
    )


def _admin_jobs(base: str, auth: tuple[str, str]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = httpx2.get(f"{base}/api/jobs", auth=auth, timeout=30).json()[
        "jobs"
    ]
    return jobs


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("e2e")
    twin_dir = root / "twin"
    twin = _spawn(
        [
            "twin",
            "run",
            "--state-dir",
            str(twin_dir),
            "--seed",
            "42",
            "--speed",
            str(SPEED),
            "--arrivals-per-hour",
            "0",
        ],
        root / "twin.log",
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        _wait_for(lambda: (twin_dir / "twin.json").exists(), "the twin")
        info = json.loads((twin_dir / "twin.json").read_text())
        port = free_port()
        server = _spawn(
            [
                "serve",
                "--store",
                str(root / "store.duckdb"),
                "--port",
                str(port),
                "--targets",
                str(twin_dir / "targets.json"),
                "--slurmrestd-url",
                info["slurmrestd_url"],
                "--scrape-interval",
                "1",
            ],
            root / "server.log",
        )
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx2.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx2.HTTPError:
                return False

        _wait_for(up, "the server")
        auth = ("admin", "admin-demo")
        deadline = time.monotonic() + SETTLE_SECONDS
        jobs = _admin_jobs(base, auth)
        while not _settled(jobs) and time.monotonic() < deadline:
            time.sleep(0.5)
            jobs = _admin_jobs(base, auth)
        by_name = {job["name"]: job for job in jobs}
        cluster = httpx2.get(f"{base}/api/cluster", auth=auth, timeout=30).json()
        alice = httpx2.get(f"{base}/api/jobs", auth=("alice", "alice-demo"), timeout=30).json()
        yield {
            "jobs": by_name,
            "cluster": cluster,
            "alice": alice,
            "base": base,
            "root": root,
            "auth": auth,
        }
    finally:
        if server is not None:
            _stop(server)
        _stop(twin)


def test_straggler_job_names_gpu_2(pipeline: dict[str, Any]) -> None:
    job = pipeline["jobs"]["llama-7b-pretrain"]
    assert job["verdict"] == "straggler"
    gpus = {g["gpu"]: g for g in job["gpus"]}
    assert gpus[2]["verdict"] == "straggler"
    assert {g["verdict"] for i, g in gpus.items() if i != 2} == {"waiting_at_barrier"}
    assert all(g["reported_util_ratio"] > 0.95 for g in gpus.values())  # everyone looks busy
    assert gpus[2]["sm_active_ratio"] > gpus[0]["sm_active_ratio"] + 0.15
    assert "gpu02 GPU 2" in job["explanation"]  # the straggler job spans both nodes


def test_data_starved_job_is_87_reported_19_real(pipeline: dict[str, Any]) -> None:
    job = pipeline["jobs"]["bert-finetune"]
    assert job["reported_util_ratio"] == pytest.approx(0.87, abs=0.03)
    assert job["sm_active_ratio"] == pytest.approx(0.19, abs=0.03)
    assert job["verdict"] == "busy_not_computing"
    assert (job["user"], job["account"], job["gpus_allocated"]) == ("bob", "nlp", 4)


def test_healthy_idle_and_failed_jobs(pipeline: dict[str, Any]) -> None:
    jobs = pipeline["jobs"]
    assert jobs["whisper-train"]["verdict"] == "healthy"
    assert jobs["whisper-train"]["sm_active_ratio"] > 0.75
    assert jobs["jupyter-debug"]["verdict"] == "idle"
    assert jobs["jupyter-debug"]["useful_gpu_hours"] == 0
    failed = jobs["vit-sweep-17"]
    assert failed["state"] == "FAILED"
    assert failed["verdict"] == "xid_error"
    assert "Xid" in failed["explanation"]


def test_gpu_hours_are_consistent(pipeline: dict[str, Any]) -> None:
    for job in pipeline["jobs"].values():
        if job["allocated_gpu_hours"] is None:
            continue
        assert job["useful_gpu_hours"] <= job["observed_gpu_hours"] + 1e-9
        assert job["observed_gpu_hours"] <= job["allocated_gpu_hours"] * 1.05 + 1e-6


def test_a_researcher_sees_only_their_jobs(pipeline: dict[str, Any]) -> None:
    names = {job["name"] for job in pipeline["alice"]["jobs"]}
    assert names == {"llama-7b-pretrain", "vit-sweep-17"}
    assert {job["user"] for job in pipeline["alice"]["jobs"]} == {"alice"}


def test_collector_health_is_recorded(pipeline: dict[str, Any]) -> None:
    targets = pipeline["cluster"]["targets"]
    dcgm = [t for t in targets if t["exporter"] == "dcgm"]
    assert {t["node"] for t in dcgm} == {"gpu01", "gpu02"}
    assert all(t["last_samples"] >= 8 for t in dcgm)
    assert {t["exporter"] for t in targets} == {"dcgm", "node", "slurmrestd"}
    assert all(t["failures_since_success"] == 0 for t in targets)
