"""Who read my weights on a real Slurm: a job reads a protected checkpoint while the bpftrace
sensor runs; the answer names the job and its user within 10 s (issue 12 acceptance).

One real cluster (munge, slurmctld, slurmd running the shipped prolog/epilog;
``tests/support/slurm.py``; ``proctrack/linuxproc``, so the sensor finds the job through the
job's ``slurmstepd: [<job>.batch]`` ancestor), ``hpcscope sensor``'s :class:`Sensor` writing a
Tetragon export, the alert engine tailing it into a real DuckDB store whose jobs come from
``squeue --json``, and :func:`who_accessed` asked as the checkpoint's owner would: the test
polls once per 0.5 s and measures from the job's own timestamp of its read to the first answer
naming the job. Needs root, bpftrace and Slurm: it fails without them, never skips.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hpcscope.model.access import Principal, Role
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.alerts.file_access import who_accessed
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.collect.scheduler import CommandSource, SchedulerCollector
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.sensor import Sensor, bundled_program_path, render_program
from hpcscope.store import Store
from tests.support.slurm import slurm_cluster
from tests.support.slurm_client import SlurmCluster
from tests.support.slurm_daemons import leftover_processes

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

CHECKPOINT_BYTES = 3 * 2**20
ANSWER_WITHIN_SECONDS = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm"), accounting=False) as running:
        yield running
    assert leftover_processes(running) == [], "processes left after teardown"


@pytest.fixture
def checkpoints() -> Iterator[Path]:
    # a short path (the program matches prefixes under 64 bytes) readable by the job's user
    root = Path(tempfile.mkdtemp(prefix="hpcs-ckpt-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        shard = root / "run-a" / "step-100" / "model.safetensors"
        shard.parent.mkdir(parents=True)
        for directory in (shard.parent.parent, shard.parent):
            os.chmod(directory, 0o755)
        shard.write_bytes(os.urandom(CHECKPOINT_BYTES))
        os.chmod(shard, 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        root.with_name(root.name + "-read-at").unlink(missing_ok=True)


def runner_for(cluster: SlurmCluster):  # type: ignore[no-untyped-def]
    def run(args: Sequence[str]) -> str:
        return cluster.run(list(args)).stdout

    return run


def test_a_job_reading_a_checkpoint_is_named_within_10_s(
    cluster: SlurmCluster, checkpoints: Path, tmp_path: Path
) -> None:
    export = tmp_path / "sensor-tetragon.log"
    export.touch()
    program = render_program(bundled_program_path().read_text(), protected=[f"{checkpoints}/"])
    out = export.open("a", encoding="utf-8")
    sensor = Sensor(program, out, node=cluster.node)
    sensor_thread = threading.Thread(target=sensor.run, kwargs={"duration_seconds": 600})
    sensor_thread.start()
    store = Store(tmp_path / "hpcscope.duckdb")
    try:
        assert sensor.attached.wait(180), "the sensor did not attach in 180 s"
        collection = SecurityCollection(
            store,
            SecurityEventBuffer(),
            load_site_rules(None),
            checkpoint_roots=[str(checkpoints)],
            tetragon_path=export,
        )
        scheduler = SchedulerCollector(
            store, CommandSource(accounting=False, runner=runner_for(cluster))
        )
        shard = checkpoints / "run-a" / "step-100" / "model.safetensors"
        # where the job writes the time of its read (the pytest tree is root's only)
        stamp = checkpoints.with_name(checkpoints.name + "-read-at")
        stamp.touch()
        os.chmod(stamp, 0o666)
        script = f"date +%s.%N > {stamp}; dd if={shard} of=/dev/null bs=1M status=none; sleep 20"
        job = cluster.sbatch(user="hpcs_alice", account="team-a", script=script)
        cluster.wait_for_state(job, "RUNNING", timeout=60)
        assert scheduler.collect_once().ok  # the job's user and account, from Slurm
        owner = Principal("hpcs_admin", Role.ADMIN)
        answered_at = None
        named = None
        deadline = time.time() + 60
        while time.time() < deadline:
            collection.collect_once()
            report = who_accessed(store, owner, str(checkpoints / "run-a"))
            named = next((a for a in report.accessors if a.job_id == job), None)
            if named is not None and named.read_bytes >= CHECKPOINT_BYTES:
                answered_at = time.time()
                break
            time.sleep(0.5)
        if named is None or answered_at is None:
            lines = export.read_text().splitlines()
            mentions = [line for line in lines if str(checkpoints) in line]
            pytest.fail(
                f"no answer naming job {job} with {CHECKPOINT_BYTES} bytes read (accessor: "
                f"{named}); sensor {sensor.stats}; export lines naming the checkpoint:\n"
                + "\n".join(mentions[-20:])
                + f"\nexport tail: {export.read_text()[-1500:]}\n{cluster.diagnostics()}"
            )
        read_at = float(stamp.read_text().strip())
        latency = answered_at - read_at
        print(f"who-read-my-weights answer {latency:.2f} s after job {job} read the checkpoint")
        assert latency <= ANSWER_WITHIN_SECONDS
        assert (named.user, named.account, named.node) == ("hpcs_alice", "team-a", cluster.node)
        assert named.read_bytes == CHECKPOINT_BYTES
        assert named.binary is not None and named.binary.rsplit("/", 1)[-1] == "dd"
        assert "open" in named.accesses and "read" in named.accesses
        # alice herself sees it too (her own job), bob does not
        alice = Principal("hpcs_alice", Role.RESEARCHER)
        assert any(a.job_id == job for a in who_accessed(store, alice, str(checkpoints)).accessors)
        bob = Principal("hpcs_bob", Role.RESEARCHER)
        assert who_accessed(store, bob, str(checkpoints)).records == []
        cluster.run(["scancel", job])
    finally:
        sensor.stop()
        sensor_thread.join(timeout=60)
        out.close()
        store.close()
