"""pytest-benchmark: Falco alert and Tetragon kprobe lines -> Arrow rows (10,000 lines each).

``make bench`` (or ``.venv/bin/pytest bench/bench_security.py -q --benchmark-only``).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.tetragon import parse_tetragon_lines

LINES = 10_000
PROC = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "security" / "proc"
CGROUP = "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"


@pytest.fixture(scope="module")
def falco_lines() -> list[bytes]:
    return [
        orjson.dumps(
            {
                "hostname": f"gpu{n % 128:03d}",
                "priority": "Error",
                "rule": "hpcscope Executable run from a temp directory in a Slurm job",
                "source": "syscall",
                "tags": ["hpcscope", "SC-2", "mitre_execution", "T1204.002"],
                "time": "2026-12-01T10:00:00.123456789Z",
                "output": "Exec from a temp directory in a Slurm job (exe=/tmp/x ...)",
                "output_fields": {
                    "evt.time": 1_764_583_200_123_456_789 + n,
                    "proc.exepath": "/tmp/x",
                    "proc.name": "x",
                    "proc.cmdline": "x --threads 8",
                    "proc.pname": "python3",
                    "proc.pid": 4242 + n,
                    "user.name": "alice",
                    "user.uid": 1000,
                    "thread.cgroups": f"cpuset={CGROUP} memory={CGROUP}",
                },
            }
        )
        for n in range(LINES)
    ]


@pytest.fixture(scope="module")
def tetragon_lines() -> list[bytes]:
    return [
        orjson.dumps(
            {
                "process_kprobe": {
                    "process": {
                        "exec_id": f"Z3B1MDE6{n % 64}",
                        "pid": 4242,
                        "uid": 1000,
                        "auid": 1000,
                        "binary": "/usr/bin/python3",
                        "arguments": "train.py --resume",
                        "parent_exec_id": "Z3B1MDE6cGFyZW50",
                    },
                    "function_name": "security_file_permission",
                    "policy_name": "hpcscope-weights",
                    "action": "KPROBE_ACTION_POST",
                    "args": [
                        {"file_arg": {"path": f"/lustre/scratch/checkpoints/r/{n}.safetensors"}},
                        {"int_arg": 4},
                    ],
                    "return": {"int_arg": 0},
                },
                "node_name": "gpu01",
                "time": "2026-12-01T10:00:00.5Z",
            }
        )
        for n in range(LINES)
    ]


def test_falco_10k_alerts(benchmark: BenchmarkFixture, falco_lines: list[bytes]) -> None:
    result = benchmark(lambda: parse_falco_lines(falco_lines, source="bench"))
    assert result.table.num_rows == LINES and result.errors == ()


def test_tetragon_10k_kprobes(benchmark: BenchmarkFixture, tetragon_lines: list[bytes]) -> None:
    def run() -> int:
        jobs = ExecJobCache(proc_root=PROC)
        rows: int = parse_tetragon_lines(tetragon_lines, source="bench", jobs=jobs).table.num_rows
        return rows

    assert benchmark(run) == LINES
