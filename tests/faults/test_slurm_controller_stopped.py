"""slurmctld stopped (SIGSTOP) mid-run under a collecting server, then continued.

Real processes: munge, slurmctld and slurmd (``tests/support/slurm.py``), the misbehaving
exporter in its ``ok`` mode, and ``hpcscope serve`` polling Slurm with ``squeue`` every second.
While the controller hangs, ``squeue`` waits for its own timeout; the poll stays in flight on
its thread (``BoundedPoll``) and GPU collection goes on every second: no gap, no OPS-1. When
the controller continues, scheduler polling resumes and a job submitted then is stored.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcscope.store import Store
from tests.faults.test_exporter_faults import NODE, Exporter
from tests.support.processes import api, serve, stop, wait_for
from tests.support.servers import free_port
from tests.support.slurm import slurm_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

STOPPED_SECONDS = 15.0


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Exporter]:
    exporter = Exporter(tmp_path)
    exporter.start()
    try:
        yield exporter
    finally:
        if exporter.process is not None:
            stop(exporter.process)


def test_a_stopped_controller_never_stops_gpu_collection(
    tmp_path: Path, exporter: Exporter
) -> None:
    with slurm_cluster(tmp_path / "slurm", accounting=False) as cluster:
        targets = tmp_path / "targets.json"
        labels = {"exporter": "dcgm", "node": NODE}
        targets.write_text(
            json.dumps([{"targets": [f"127.0.0.1:{exporter.port}"], "labels": labels}])
        )
        config = tmp_path / "hpcscope.yaml"
        config.write_text(
            f"targets_path: {targets}\nscrape_interval_seconds: 1\nscrape_timeout_seconds: 2\n"
            "scheduler_source: commands\nslurm_accounting: false\nscheduler_poll_seconds: 1\n"
        )
        store_path = tmp_path / "store.duckdb"
        server, base = serve(
            store_path,
            free_port(),
            tmp_path / "server.log",
            "--config",
            str(config),
            env=cluster.env,
        )
        try:
            first = cluster.sbatch(user="hpcs_alice", account="team-a", gpus=1, script="sleep 300")
            wait_for(
                lambda: any(j["job_id"] == str(first) for j in api(base, "/api/jobs")["jobs"]),
                "the first job polled",
            )
            controller = cluster.processes["slurmctld"]
            os.kill(controller.pid, signal.SIGSTOP)
            stopped_at = time.time()
            try:
                time.sleep(STOPPED_SECONDS)
                assert server.poll() is None
            finally:
                os.kill(controller.pid, signal.SIGCONT)
            resumed_at = time.time()
            second = cluster.sbatch(user="hpcs_alice", account="team-a", gpus=1, script="sleep 300")
            wait_for(
                lambda: any(j["job_id"] == str(second) for j in api(base, "/api/jobs")["jobs"]),
                "a job submitted after the controller continued",
                timeout=90,
            )
        finally:
            stop(server)
    with Store(store_path, read_only=True) as store:
        rows = store.query(
            "SELECT epoch(ts) AS t FROM scrapes WHERE ok AND exporter = 'dcgm' ORDER BY ts"
        ).to_pylist()
        gaps = store.query("SELECT * FROM collection_gaps").to_pylist()
    during = [r["t"] for r in rows if stopped_at <= r["t"] <= resumed_at]
    print(f"{len(during)} good GPU scrapes in the {resumed_at - stopped_at:.0f} s stopped")
    assert len(during) >= STOPPED_SECONDS / 2  # about one a second, not one per squeue timeout
    assert gaps == []
