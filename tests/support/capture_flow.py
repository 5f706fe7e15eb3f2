"""The golden path's trace capture on a real Slurm: submit, collect, read the answer back.

:func:`check_capture_job` submits ``tests.support.capture_ranks`` (a plain DDP script, 4 gloo
CPU ranks, rank 2 sleeping in its data loading) with ``sbatch`` and no capture flag: the
cluster's site config (``capture_dir=``, TaskProlog, ``tests/support/slurm_config.py``) is
what switches the capture on. While the job runs, the collector's pieces run every second (the
mapping and scheduler collectors for the platform's allocations, then the capture spool); once
the window is stored, the job page, ``GET /api/jobs/{id}`` and ``hpcscope job ID --json
--store`` must name rank 2 and ``data_load``, and the time from the window's close (its last
meta file) to the answer in the store must be under 60 s.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from hpcscope.cli.main import app as cli_app
from hpcscope.model.capture import META_PATTERN, CaptureMeta
from hpcscope.serve.app import create_app
from hpcscope.service.collect.attribution import MappingCollector
from hpcscope.service.collect.scheduler import CommandSource, SchedulerCollector
from hpcscope.service.core import Service
from hpcscope.service.identity.users import DEMO_LOGINS, UserDirectory
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import CaptureSection
from hpcscope.service.traces.captures import CaptureSpool
from hpcscope.store import Store
from hpcscope.store.captures import job_captures
from tests.support.paths import REPO_ROOT
from tests.support.rank_launch import free_port
from tests.support.slurm_client import SlurmCluster
from tests.support.slurm_config import NODE

DELAYED_RANK = 2
DELAYED_PHASE = "data"  # capture_ranks' name; the analysis calls it data_load
ANSWER_WITHIN_SECONDS = 60.0


def _admin_headers() -> dict[str, str]:
    (admin,) = [login for login in DEMO_LOGINS if login.name == "admin"]
    token = base64.b64encode(f"admin:{admin.password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _job_user(python: str) -> tuple[str, str]:
    """The test user alice (account team-a) when she can run this interpreter, else root (a
    virtual environment under a private home: the job must run the same torch)."""
    done = subprocess.run(
        ["runuser", "-u", "hpcs_alice", "--", python, "-c", "import torch"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return ("hpcs_alice", "team-a") if done.returncode == 0 else ("root", "root")


def _window_closed(job_dir: Path) -> float | None:
    """When the last rank's meta says the window ended (Unix seconds), once all 4 are in."""
    metas = [
        CaptureMeta.from_json(p.read_text())
        for p in job_dir.glob("*.meta.json")
        if META_PATTERN.match(p.name)
    ]
    return max(m.end_ts for m in metas) if len(metas) == 4 else None


def check_capture_job(cluster: SlurmCluster, tmp_path: Path, *, python: str) -> None:
    spool = cluster.root / "capture"
    spec = cluster.root / "capture-spec.json"
    spec.write_text(
        json.dumps(
            {
                "world_size": 4,
                "port": free_port(),
                "steps": 40,
                "rank": DELAYED_RANK,
                "phase": DELAYED_PHASE,
                "delay_seconds": 0.06,
            }
        )
    )
    spec.chmod(0o644)
    output = cluster.root / "job-output" / "capture-%j.out"
    user, account = _job_user(python)
    job = cluster.sbatch(
        user=user,
        account=account,
        gpus=4,
        name="capture-ddp",
        script=f"cd {REPO_ROOT} && OMP_NUM_THREADS=1 exec {python} -m "
        f"tests.support.capture_ranks {spec}",
        extra=["--cpus-per-task=4", f"--output={output}"],
    )
    store_path = tmp_path / "capture.duckdb"
    store = Store(store_path)
    found_at: float | None = None
    closed_at: float | None = None
    try:
        mapping = MappingCollector(
            store, node=NODE, mapping_dir=cluster.mapping_dir, record_dir=cluster.record_dir
        )
        scheduler = SchedulerCollector(
            store, CommandSource(runner=lambda args: cluster.run(list(args)).stdout)
        )
        captures = CaptureSpool(store, spool, grace_seconds=30)
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            mapping.collect_once()
            scheduler.collect_once()
            cycle = captures.collect_once()
            assert not cycle.errors, cycle.errors
            closed_at = closed_at or _window_closed(spool / job)
            rows = job_captures(store, job)
            if rows and rows[0].ranks == 4:
                found_at = time.time()
                break
            if cluster.job_field(job, "JobState") in ("FAILED", "CANCELLED", "TIMEOUT"):
                break
            time.sleep(1.0)
        out = Path(str(output).replace("%j", job))
        log = out.read_text(errors="replace")[-3000:] if out.exists() else "(no output)"
        assert found_at is not None, f"no capture of job {job}\n{log}\n{cluster.diagnostics()}"
        assert closed_at is not None
        latency = found_at - closed_at
        assert latency < ANSWER_WITHIN_SECONDS, f"answer {latency:.1f} s after the window closed"
        (row,) = job_captures(store, job)
        assert row.attribution == "verified", row.notes
        assert (row.straggler_rank, row.straggler_phase) == (DELAYED_RANK, "data_load")
        assert row.straggler_node == NODE
        cluster.wait_until_idle(timeout=120)
        scheduler.collect_once()
    finally:
        store.close()
    settings = Settings(
        store_path=store_path,
        secret_key="test-secret",
        password_hash_cost_log2=4,
        capture=CaptureSection(spool_dir=spool),
    )
    service = Service.open(settings, users=UserDirectory.demo(hash_cost_log2=4))
    try:
        with TestClient(create_app(service), headers=_admin_headers()) as client:
            page = client.get(f"/jobs/{job}")
            assert page.status_code == 200
            assert "rank 2" in page.text and "data_load" in page.text
            body = client.get(f"/api/jobs/{job}").json()
        straggler = body["phases"]["windows"][0]["straggler"]
        assert (straggler["rank"], straggler["phase"]) == (DELAYED_RANK, "data_load")
    finally:
        service.close()
    result = CliRunner().invoke(cli_app, ["job", job, "--store", str(store_path), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    straggler = document["phases"]["windows"][0]["straggler"]
    assert (straggler["rank"], straggler["phase"]) == (DELAYED_RANK, "data_load")
    assert straggler["gpu"] is not None  # placed on one of the job's GPUs
    print(f"capture: answer {latency:.1f} s after the window closed (job {job})")
