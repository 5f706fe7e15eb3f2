from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpcscope.ingest.slurm import parse_slurmrestd_jobs
from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin import mapping
from hpcscope.twin.cluster import TwinCluster
from hpcscope.twin.dcgm import render_page
from hpcscope.twin.scheduler import JobState, Scheduler
from hpcscope.twin.workloads import GpuPhysics, Profile, shares_for

TOPOLOGY = load_topology(bundled_topology())


def _samples(text: str) -> dict[tuple[str, str, str | None], float]:
    """(metric, gpu, hpc_job) -> value, through the reference parser."""
    out: dict[tuple[str, str, str | None], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, sample.labels["gpu"], sample.labels.get("hpc_job"))] = sample.value
    return out


def test_mapping_files_follow_dcgm_exporter_rules(tmp_path: Path) -> None:
    mapping.add_job(tmp_path, "1", "100")
    mapping.add_job(tmp_path, "1", "200")  # shared GPU: two lines
    mapping.add_job(tmp_path, "1", "200")  # idempotent
    mapping.add_job(tmp_path, "2.3", "300")  # MIG instance
    (tmp_path / "notes.txt").write_text("999\n")  # not a GPU name: ignored
    (tmp_path / "4").write_text("")  # empty: no job
    assert (tmp_path / "1").read_text() == "100\n200\n"
    assert mapping.read_mapping(tmp_path) == {"1": ["100", "200"], "2.3": ["300"]}
    mapping.remove_job(tmp_path, "1", "100")  # epilog of job 100 leaves job 200
    assert (tmp_path / "1").read_text() == "200\n"
    mapping.remove_job(tmp_path, "1", "200")
    assert not (tmp_path / "1").exists()
    mapping.remove_job(tmp_path, "1", "200")  # idempotent


def test_scheduler_is_deterministic_under_a_seed(tmp_path: Path) -> None:
    def run(seed: int, root: Path) -> list[tuple[int, str, str, int, str]]:
        scheduler = Scheduler(TOPOLOGY, root, start_time=1e9, seed=seed, arrivals_per_hour=60)
        scheduler.submit_demo_scenario()
        for step in range(0, 6 * 3600, 60):
            scheduler.tick(1e9 + step)
        return [
            (j.job_id, j.user, j.profile.value, j.gpus, j.state.value)
            for j in scheduler.jobs.values()
        ]

    first = run(7, tmp_path / "a")
    assert first == run(7, tmp_path / "b")
    assert first != run(8, tmp_path / "c")
    assert len(first) > 5


def test_demo_scenario_fills_the_cluster_and_writes_the_mapping(tmp_path: Path) -> None:
    scheduler = Scheduler(TOPOLOGY, tmp_path, start_time=1e9, arrivals_per_hour=0)
    jobs = scheduler.submit_demo_scenario()
    scheduler.tick(1e9)
    assert all(job.state is JobState.RUNNING for job in jobs)
    straggler, starved = jobs[0], jobs[1]
    # the straggler job spans both nodes (GPUs 0-3 of each): AllReduce over InfiniBand
    assert straggler.allocation == [(n, g) for n in ("gpu01", "gpu02") for g in range(4)]
    assert straggler.allocation[straggler.straggler_gpu or 0] == ("gpu02", 2)
    assert starved.allocation == [("gpu02", g) for g in range(4, 8)]
    on_gpu01 = mapping.read_mapping(scheduler.mapping_dir("gpu01"))
    assert {g: on_gpu01[str(g)] for g in range(4)} == {g: [str(straggler.job_id)] for g in range(4)}
    failed = jobs[4]
    scheduler.tick(1e9 + 121)
    assert failed.faulted(1e9 + 121) and failed.state is JobState.RUNNING  # hangs in NCCL
    scheduler.tick(1e9 + 151)
    failed = jobs[4]  # the same job, read again: tick() ended it (mypy keeps the narrowing above)
    assert failed.state is JobState.FAILED and failed.exit_code == 1
    node, gpu = failed.allocation[0]
    assert str(gpu) not in mapping.read_mapping(scheduler.mapping_dir(node))


def _steady(
    profile: Profile, *, gpu_index: int = 0, straggler: int | None = None, seconds: int = 600
) -> dict[str, float]:
    gpu = TOPOLOGY.gpus[0]
    physics = GpuPhysics(gpu.model)
    rng = np.random.default_rng(0)
    shares = shares_for(
        profile, gpu_index=gpu_index, straggler_gpu=straggler, memory_bytes=gpu.model.memory_bytes
    )
    samples = [physics.step(shares, dt_seconds=2.0, rng=rng) for _ in range(seconds // 2)]
    tail = samples[len(samples) // 2 :]
    return {
        "util": float(np.mean([s.gpu_util_percent for s in tail])) / 100,
        "sm": float(np.mean([s.sm_active_ratio for s in tail])),
        "tensor": float(np.mean([s.tensor_active_ratio for s in tail])),
        "power": float(np.mean([s.power_watts for s in tail])),
        "temp": float(np.mean([s.gpu_temp_celsius for s in tail])),
        "clock": float(np.mean([s.sm_clock_mhz for s in tail])),
        "throttle": float(tail[-1].clock_throttle_reasons),
        "energy_j": samples[-1].energy_millijoules / 1000,
    }


def test_data_starved_profile_is_the_seeds_87_reported_19_real() -> None:
    counters = _steady(Profile.DATA_STARVED)
    assert counters["util"] == pytest.approx(0.87, abs=0.02)
    assert counters["sm"] == pytest.approx(0.19, abs=0.02)
    assert counters["power"] < 300


def test_straggler_computes_more_and_is_throttled_while_peers_spin() -> None:
    slow = _steady(Profile.STRAGGLER, gpu_index=2, straggler=2)
    peer = _steady(Profile.STRAGGLER, gpu_index=0, straggler=2)
    assert peer["util"] == pytest.approx(1.0, abs=0.02)  # waiting at the barrier looks busy
    assert slow["sm"] > peer["sm"] + 0.15
    assert slow["clock"] < 0.6 * peer["clock"]
    assert int(slow["throttle"]) & 0x40
    assert slow["temp"] > peer["temp"] + 10


def test_physics_is_consistent_across_profiles() -> None:
    healthy = _steady(Profile.HEALTHY)
    idle = _steady(Profile.IDLE_ALLOCATED)
    assert healthy["sm"] > 0.75 and healthy["util"] > 0.95
    assert idle["util"] == 0 and idle["sm"] == 0
    assert healthy["power"] > 2 * idle["power"]
    assert healthy["temp"] > idle["temp"]
    # the energy counter integrates power: 600 s at the mean power, within noise
    assert healthy["energy_j"] == pytest.approx(healthy["power"] * 600, rel=0.1)


def test_page_is_valid_exposition_with_hpc_job_copies() -> None:
    gpus = TOPOLOGY.node("gpu01").gpus
    physics = GpuPhysics(gpus[0].model)
    counters = {
        g.index: physics.step(None, dt_seconds=1, rng=np.random.default_rng(0)) for g in gpus
    }
    text = render_page(gpus, counters, {"1": ["100", "200"], "3": ["300"]}, hostname="gpu01")
    samples = _samples(text)
    assert ("DCGM_FI_DEV_GPU_UTIL", "1", "100") in samples
    assert ("DCGM_FI_DEV_GPU_UTIL", "1", "200") in samples
    assert ("DCGM_FI_DEV_GPU_UTIL", "1", None) not in samples
    assert ("DCGM_FI_DEV_GPU_UTIL", "0", None) in samples
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_SM_CLOCK{"))
    assert first.startswith('DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-')
    assert ',modelName="NVIDIA H100 80GB HBM3",hostname="gpu01",' in first


def test_running_twin_serves_pages_and_slurmrestd_on_loopback(tmp_path: Path) -> None:
    with TwinCluster(TOPOLOGY, tmp_path, seed=1, speed=1.0, arrivals_per_hour=0) as twin:
        targets = json.loads((tmp_path / "targets.json").read_text())
        assert {t["labels"]["node"] for t in targets} == {"gpu01", "gpu02"}
        url = f"http://{targets[0]['targets'][0]}/metrics"
        urllib.request.urlopen(url).read()
        time.sleep(0.3)
        text = urllib.request.urlopen(url).read().decode()
        samples = _samples(text)
        job_ids = {job for (_, _, job) in samples if job}
        assert len(job_ids) == 4  # gpu01: half the straggler job, the healthy, idle and failing
        body = urllib.request.urlopen(f"{twin.slurmrestd_url}/slurm/v0.0.40/jobs").read()
    snapshot = parse_slurmrestd_jobs(body, source="twin")
    jobs = {row["job_id"]: row for row in snapshot.jobs.to_pylist()}
    assert job_ids <= set(jobs)
    straggler = next(jobs[j] for j in job_ids if jobs[j]["gpus"] == 8)
    assert (straggler["user"], straggler["account"], straggler["gpus"]) == ("alice", "vision", 8)
    assert straggler["state"] == "RUNNING"
    assert not snapshot.warnings


def test_twin_writes_what_the_prolog_writes(tmp_path: Path) -> None:
    """The twin's mapping files and job records read back through the reference readers."""
    from hpcscope.ingest.slurm.jobmap import read_job_records, read_mapping_dir

    scheduler = Scheduler(TOPOLOGY, tmp_path, start_time=1e9, arrivals_per_hour=0)
    jobs = scheduler.submit_demo_scenario()
    scheduler.tick(1e9)
    snapshot = read_mapping_dir(scheduler.mapping_dir("gpu02"), node="gpu02")
    assert not snapshot.warnings
    assert snapshot.jobs_by_gpu()[(4, None)] == [str(jobs[1].job_id)]
    records = read_job_records(scheduler.record_dir("gpu02"))
    assert not records.warnings
    by_id = {r.job_id: r for r in records.records}
    starved = by_id[str(jobs[1].job_id)]
    assert (starved.user, starved.account, starved.gpus) == ("bob", "nlp", ("4", "5", "6", "7"))
    assert starved.end_time is None
    scheduler.tick(1e9 + 151)  # the failing job ends: the epilog completes its record
    failed = {r.job_id: r for r in read_job_records(scheduler.record_dir("gpu01")).records}[
        str(jobs[4].job_id)
    ]
    assert failed.end_time == pytest.approx(1e9 + 150) and failed.exit_code == 1


def test_mapped_node_endpoint_follows_an_existing_mapping_directory(tmp_path: Path) -> None:
    from hpcscope.twin.dcgm import mapped_node_endpoint

    mapping.add_job(tmp_path, "3", "900")
    ticks = iter(range(0, 1000, 10))
    clock = lambda: float(next(ticks))  # noqa: E731
    endpoint = mapped_node_endpoint(
        TOPOLOGY, "slurm-n1", tmp_path, profile=Profile.HEALTHY, clock=clock
    )
    endpoint.collect()
    samples = _samples(endpoint.collect())
    assert samples[("DCGM_FI_DEV_GPU_UTIL", "3", "900")] > 90  # the mapped GPU runs the job
    assert samples[("DCGM_FI_DEV_GPU_UTIL", "0", None)] == 0  # the others idle, unlabelled
    assert 'hostname="slurm-n1"' in endpoint.collect()
