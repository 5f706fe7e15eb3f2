"""The GPU node's process-list script, run by /bin/sh with a fake ``nvidia-smi`` on PATH and
a fake proc tree; the server's ProcessSpool reads what it wrote."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpcscope.service.telemetry_rules.spool import ProcessSpool
from hpcscope.store import Store
from hpcscope.store import telemetry_rules as queries
from tests.support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "slurm" / "hpcscope-gpu-processes"
UUID = "GPU-6f1c0b5e-2d63-4a3b-9d3e-1f6a1e0b9a01"
APPS = f"""timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
2026/12/01 12:00:05.123, {UUID}, 2000, python3, 61000 MiB
2026/12/01 12:00:05.123, {UUID}, 4242, python3, 1200 MiB
2026/12/01 12:00:05.123, {UUID}, 999, gone, 10 MiB
"""


def _fake_nvidia_smi(bin_dir: Path) -> None:
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=index,uuid) printf 'index, uuid\\n0, {UUID}\\n' ;;\n"
        f"  --query-compute-apps=*) cat <<'END'\n{APPS}END\n ;;\n"
        '  *) echo "unexpected $*" >&2; exit 9 ;;\n'
        "esac\n"
    )
    tool.chmod(0o755)


def _run(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    proc = tmp_path / "proc"
    for pid, job in ((2000, "7"), (4242, "8")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(
            f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"
        )
    return subprocess.run(
        [str(SCRIPT), "-d", str(tmp_path / "spool"), "-n", "gpu01"],
        env={"PATH": path, "HPCSCOPE_PROC": str(proc)},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_writes_the_lists_and_the_spool_reads_them(tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path / "bin")
    result = _run(tmp_path, f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert result.returncode == 0, result.stderr
    node = tmp_path / "spool" / "gpu01"
    assert sorted(p.name for p in node.iterdir()) == ["compute-apps.csv", "gpus.csv", "proc"]
    assert sorted(p.name for p in (node / "proc").iterdir()) == ["2000", "4242"]
    with Store(tmp_path / "s.duckdb") as store:
        read = ProcessSpool(store, tmp_path / "spool").collect_once()
        assert (read.rows, read.errors) == (3, ())
        rows = queries.gpu_processes(store).to_pylist()
        assert [(r["pid"], r["gpu"], r["job_id"]) for r in rows] == [
            (999, 0, None), (2000, 0, "7"), (4242, 0, "8")
        ]  # fmt: skip


def test_not_a_gpu_node_writes_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, "/usr/bin:/bin")
    assert result.returncode == 0
    assert "not a GPU node" in result.stderr
    assert not (tmp_path / "spool").exists()
