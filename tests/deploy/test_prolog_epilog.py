"""The shipped prolog/epilog, run as Slurm runs them (a fresh environment of SLURM_* variables),
without a cluster: file format, shared nodes, idempotence, concurrency, failures, no GPUs.
The real-Slurm run is in tests/integration/test_slurm_golden_path.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hpcscope.ingest.slurm.jobmap import read_job_records, read_mapping_dir
from tests.support.paths import REPO_ROOT

PROLOG = REPO_ROOT / "deploy" / "slurm" / "prolog"
EPILOG = REPO_ROOT / "deploy" / "slurm" / "epilog"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A slurm.conf directory with hpcscope.conf beside it (how the prolog finds its config)."""
    (tmp_path / "slurm.conf").write_text("# not read by the hook\n")
    (tmp_path / "hpcscope.conf").write_text(
        f"mapping_dir={tmp_path}/mapping\nrecord_dir={tmp_path}/records\n"
        f"log_file={tmp_path}/hooks.log\nlog_level=info\n"
    )
    return tmp_path


def run_hook(
    hook: Path, site: Path, job: str, *, gpus: str | None = "0,1", **env: str
) -> subprocess.CompletedProcess[str]:
    environment = {
        "SLURM_CONF": str(site / "slurm.conf"),
        "SLURM_JOB_ID": job,
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1001",
        "SLURM_JOB_ACCOUNT": "team-a",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "c1",
        "SLURMD_NODENAME": "n01",
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmd" if hook == EPILOG else "prolog_slurmd",
        "PATH": "/usr/bin:/bin",
        **env,
    }
    if gpus is not None:
        environment["SLURM_JOB_GPUS"] = gpus
    return subprocess.run(
        [str(hook)], env=environment, capture_output=True, text=True, timeout=30, check=False
    )


def mapping(site: Path) -> dict[str, str]:
    directory = site / "mapping"
    if not directory.exists():
        return {}
    return {
        p.name: p.read_text() for p in sorted(directory.iterdir()) if not p.name.startswith(".")
    }


def test_prolog_writes_one_line_per_gpu_and_a_record(site: Path) -> None:
    done = run_hook(PROLOG, site, "101", gpus="0,3")
    assert done.returncode == 0, done.stderr
    assert mapping(site) == {"0": "101\n", "3": "101\n"}
    records = read_job_records(site / "records")
    assert records.warnings == []
    (record,) = records.records
    assert (record.job_id, record.user, record.account, record.node, record.gpus) == (
        "101",
        "alice",
        "team-a",
        "n01",
        ("0", "3"),
    )
    assert record.end_time is None
    # dcgm-exporter's reader sees the same thing
    assert read_mapping_dir(site / "mapping", node="n01").jobs_by_gpu() == {
        (0, None): ["101"],
        (3, None): ["101"],
    }


def test_shared_gpu_keeps_both_jobs_and_epilog_removes_only_its_own(site: Path) -> None:
    run_hook(PROLOG, site, "101", gpus="0,1")
    run_hook(PROLOG, site, "202", gpus="1,2")
    assert mapping(site) == {"0": "101\n", "1": "101\n202\n", "2": "202\n"}
    assert run_hook(EPILOG, site, "101", gpus="0,1").returncode == 0
    assert mapping(site) == {"1": "202\n", "2": "202\n"}
    record = json.loads((site / "records" / "101.json").read_text())
    assert record["end_time"] is not None and record["exit_code"] is None


def test_hooks_are_idempotent(site: Path) -> None:
    for _ in range(2):
        run_hook(PROLOG, site, "101", gpus="0")
    first = json.loads((site / "records" / "101.json").read_text())["start_time"]
    run_hook(PROLOG, site, "101", gpus="0")
    assert mapping(site) == {"0": "101\n"}
    assert json.loads((site / "records" / "101.json").read_text())["start_time"] == first
    for _ in range(2):
        run_hook(EPILOG, site, "101", gpus="0", SLURM_JOB_EXIT_CODE2="3:0")
    assert mapping(site) == {}
    assert json.loads((site / "records" / "101.json").read_text())["exit_code"] == 3


def test_epilog_clears_by_job_id_even_without_gpu_list_or_record(site: Path) -> None:
    run_hook(PROLOG, site, "101", gpus="4")
    (site / "records" / "101.json").unlink()  # record lost; the exporter restarted...
    assert run_hook(EPILOG, site, "101", gpus=None).returncode == 0
    assert mapping(site) == {}


def test_prolog_without_gpus_writes_only_the_record(site: Path) -> None:
    done = run_hook(PROLOG, site, "303", gpus=None)
    assert done.returncode == 0
    assert mapping(site) == {}
    assert json.loads((site / "records" / "303.json").read_text())["gpus"] == []
    assert run_hook(EPILOG, site, "303", gpus=None).returncode == 0


def test_uuids_resolve_through_the_gpu_map_and_mig_names(site: Path) -> None:
    (site / "gpu-map").write_text(
        "# slurm index or uuid -> dcgm name\n0 2\n1 3\nGPU-aaaa-bbbb 5\nMIG-1234-5678 6.7\n"
    )
    with (site / "hpcscope.conf").open("a") as conf:
        conf.write(f"gpu_map={site}/gpu-map\n")
    run_hook(PROLOG, site, "404", gpus="0,1,7")
    assert mapping(site) == {"2": "404\n", "3": "404\n"}  # 7 is not in the map: not guessed
    assert "GPU '7': no dcgm index known" in (site / "hooks.log").read_text()
    # newer Slurm: UUIDs in CUDA_VISIBLE_DEVICES, indices absent
    run_hook(PROLOG, site, "505", gpus="", CUDA_VISIBLE_DEVICES="GPU-aaaa-bbbb,MIG-1234-5678")
    assert mapping(site)["5"] == "505\n"
    assert mapping(site)["6.7"] == "505\n"
    assert read_mapping_dir(site / "mapping").jobs_by_gpu()[(6, 7)] == ["505"]


def test_unresolvable_uuid_and_relative_cuda_indices_are_not_labelled(site: Path) -> None:
    run_hook(PROLOG, site, "606", gpus="", CUDA_VISIBLE_DEVICES="GPU-deadbeef-0000")
    run_hook(PROLOG, site, "707", gpus=None, CUDA_VISIBLE_DEVICES="0,1")
    assert mapping(site) == {}
    log = (site / "hooks.log").read_text()
    assert "GPU-deadbeef-0000" in log and "not labelled" in log
    assert "CUDA_VISIBLE_DEVICES=0,1 without SLURM_JOB_GPUS" in log


def test_never_fails_the_job(site: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    (site / "hpcscope.conf").write_text(
        f"mapping_dir={blocked}/mapping\nrecord_dir={blocked}/records\n"
        f"log_file={site}/hooks.log\nbogus line\n"
    )
    for hook in (PROLOG, EPILOG):
        done = run_hook(hook, site, "808")
        assert done.returncode == 0
    log = (site / "hooks.log").read_text()
    assert "failed" in log and "ignored 'bogus line'" in log
    # no job id at all: still 0, and logged
    env = {"SLURM_CONF": str(site / "slurm.conf"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(PROLOG)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "no usable SLURM_JOB_ID" in (site / "hooks.log").read_text()


def test_a_stuck_lock_times_out_and_exits_zero(site: Path) -> None:
    import fcntl

    (site / "records").mkdir()
    with (site / "hpcscope.conf").open("a") as conf:
        conf.write("timeout_seconds=1\n")
    with open(site / "records" / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run_hook(PROLOG, site, "909")
    assert done.returncode == 0
    assert "gave up after 1s" in (site / "hooks.log").read_text()
    assert mapping(site) == {}


def test_concurrent_prologs_and_epilogs_on_one_gpu_lose_no_line(site: Path) -> None:
    jobs = [str(1000 + i) for i in range(12)]
    threads = [
        threading.Thread(target=run_hook, args=(PROLOG, site, job), kwargs={"gpus": "0"})
        for job in jobs
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(mapping(site)["0"].split()) == jobs
    leaving = jobs[::2]
    threads = [
        threading.Thread(target=run_hook, args=(EPILOG, site, job), kwargs={"gpus": "0"})
        for job in leaving
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(mapping(site)["0"].split()) == jobs[1::2]


def test_idle_zero_and_blank_lines_from_other_tools_are_dropped(site: Path) -> None:
    (site / "mapping").mkdir()
    (site / "mapping" / "0").write_text("0\n\n")
    run_hook(PROLOG, site, "111", gpus="0")
    assert mapping(site) == {"0": "111\n"}


def test_array_and_het_variables_give_the_canonical_id_in_the_record(site: Path) -> None:
    run_hook(PROLOG, site, "8", gpus="5", SLURM_ARRAY_JOB_ID="3", SLURM_ARRAY_TASK_ID="1")
    run_hook(PROLOG, site, "10", gpus="6", SLURM_HET_JOB_ID="9", SLURM_HET_JOB_OFFSET="1")
    records = {r.raw_job_id: r for r in read_job_records(site / "records").records}
    assert records["8"].job_id == "3_1" and records["8"].label == "8"
    assert records["10"].job_id == "9+1"
    # the mapping files always hold the raw SLURM_JOB_ID
    assert mapping(site) == {"5": "8\n", "6": "10\n"}


def test_environment_variable_overrides_the_config_mapping_dir(site: Path) -> None:
    run_hook(PROLOG, site, "121", gpus="0", DCGM_HPC_JOB_MAPPING_DIR=str(site / "elsewhere"))
    assert (site / "elsewhere" / "0").read_text() == "121\n"


def test_runs_under_the_system_python_without_third_party_modules() -> None:
    source = PROLOG.read_text()
    assert source.startswith("#!/usr/bin/python3 -IS")
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.strip().startswith(("import ", "from "))
    }
    assert imported <= set(sys.stdlib_module_names)
    assert os.readlink(EPILOG) == "prolog"


def test_shipped_config_examples_are_valid(site: Path) -> None:
    """Every key of hpcscope.conf.example and every line of gpu-map.example is accepted."""
    deploy = REPO_ROOT / "deploy" / "slurm"
    example = (deploy / "hpcscope.conf.example").read_text()
    example = example.replace("/run/dcgm-exporter/job-mapping", str(site / "mapping"))
    example = example.replace("/run/hpcscope/jobs", str(site / "records"))
    example = example.replace("log_file=\n", f"log_file={site}/hooks.log\n")
    example = example.replace("log_level=warning", "log_level=info")
    example = example.replace("gpu_map=\n", f"gpu_map={deploy}/gpu-map.example\n")
    (site / "hpcscope.conf").write_text(example)
    assert run_hook(PROLOG, site, "131", gpus="0,1").returncode == 0
    log = (site / "hooks.log").read_text()
    assert "ignored" not in log and "bad gpu_map line" not in log, log
    assert mapping(site) == {"2": "131\n", "3": "131\n"}  # 0 -> 2, 1 -> 3 in the example map


TASK_PROLOG = REPO_ROOT / "deploy" / "slurm" / "task-prolog"


def test_prolog_creates_the_jobs_integrity_spool_and_task_prolog_exports_it(site: Path) -> None:
    conf = site / "hpcscope.conf"
    conf.write_text(conf.read_text() + f"integrity_dir={site}/integrity\n")
    assert run_hook(PROLOG, site, "808").returncode == 0
    spool = site / "integrity" / "808"
    assert spool.is_dir() and (spool.stat().st_mode & 0o777) == 0o700
    done = run_hook(TASK_PROLOG, site, "808")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"export HPCSCOPE_INTEGRITY_SPOOL={site}/integrity\n"
    conf.write_text(conf.read_text() + "integrity_default=1\n")
    done = run_hook(TASK_PROLOG, site, "808")
    assert done.stdout.splitlines() == [
        f"export HPCSCOPE_INTEGRITY_SPOOL={site}/integrity",
        "export HPCSCOPE_INTEGRITY=1",
    ]


def test_without_integrity_dir_nothing_is_exported_or_created(site: Path) -> None:
    assert run_hook(PROLOG, site, "809").returncode == 0
    assert not (site / "integrity").exists()
    done = run_hook(TASK_PROLOG, site, "809")
    assert (done.returncode, done.stdout) == (0, "")


def test_capture_dir_makes_the_spool_and_the_task_prolog_switches_capture_on(site: Path) -> None:
    conf = site / "hpcscope.conf"
    conf.write_text(
        conf.read_text() + f"capture_dir={site}/capture\ncapture_schedule=1,1,6\n"
        "capture_first_step=4\n"
    )
    assert run_hook(PROLOG, site, "810").returncode == 0
    spool = site / "capture" / "810"
    assert spool.is_dir() and (spool.stat().st_mode & 0o777) == 0o700
    done = run_hook(TASK_PROLOG, site, "810", PYTHONPATH="/opt/job-libs", NCCL_DEBUG="WARN")
    assert done.returncode == 0, done.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines())
    site_dir = str(REPO_ROOT / "deploy" / "slurm" / "capture")
    assert exports["HPCSCOPE_CAPTURE"] == "1"
    assert exports["HPCSCOPE_CAPTURE_SPOOL"] == f"{site}/capture"
    assert exports["HPCSCOPE_CAPTURE_SCHEDULE"] == "1,1,6"
    assert exports["HPCSCOPE_CAPTURE_FIRST_STEP"] == "4"
    assert exports["PYTHONPATH"] == f"{site_dir}:/opt/job-libs"  # the job's path is kept
    assert (Path(site_dir) / "sitecustomize.py").is_file()
    assert "NCCL_DEBUG" not in exports  # the job set its own: kept
    assert exports["NCCL_DEBUG_FILE"] == f"{spool}/nccl-%h-%p.log"
    assert exports["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == f"{spool}/flight-recorder-rank-"
    assert exports["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"


def test_the_task_prolog_exports_no_capture_for_an_odd_job_id(site: Path) -> None:
    conf = site / "hpcscope.conf"
    conf.write_text(conf.read_text() + f"capture_dir={site}/capture\n")
    done = run_hook(TASK_PROLOG, site, "../../etc")
    assert (done.returncode, done.stdout) == (0, "")
