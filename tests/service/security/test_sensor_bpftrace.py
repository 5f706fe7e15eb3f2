"""The sensor on the real kernel: Debian's bpftrace, as root, with the shipped program.

One sensor runs for the module (bpftrace compiles its 40 probes in 5-30 s on a loaded
machine). A workload, started under a process named ``slurmstepd: [777.batch]`` (how
``proctrack/linuxproc`` job processes descend from their step daemon), reads a protected file
in two parts around a one-second flush, maps it, writes another, execs a binary from a temp
directory, connects out, and calls ptrace, process_vm_readv and setns. The Tetragon export the
sensor writes must parse with the Tetragon parser and say exactly that, with the job and the
bytes. Needs bpftrace and root: the test fails without them, it never skips.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from hpcscope.analysis.alerts.file_access import access_records
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.model.security_events import TetragonRow
from hpcscope.service.security.sensor import Sensor, bundled_program_path, render_program
from hpcscope.service.security.sensor_watch import SensorWatch

SIZE = 300_000
WRITTEN = 12_345
WORKLOAD = """
import ctypes, os, socket, subprocess, sys, time
root, other, temp_true = sys.argv[1:4]
fd = os.open(root + "/model.pt", os.O_RDONLY)
first = len(os.read(fd, 100_000))
time.sleep(2.5)                      # the first 100,000 bytes leave with a map flush
rest = 0
while chunk := os.read(fd, 1 << 16):
    rest += len(chunk)
import mmap
mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
os.close(fd)
with open(root + "/optimizer.bin", "wb") as out:
    out.write(b"x" * 12_345)
open(other).read()                   # not protected: no event
subprocess.run([temp_true], check=True)
s = socket.socket(); s.setblocking(False)
s.connect_ex(("10.255.255.1", 4444)); s.close()
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace(2, 999_999, 0, 0)        # PTRACE_PEEKDATA on no process: ESRCH, still traced
libc.process_vm_readv(999_999, None, 0, None, 0, 0)
libc.setns(-1, 0x40000000)           # EBADF, still traced
print(first + rest, flush=True)
"""


@dataclass
class Run:
    events: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    root: Path
    workload_pid: int
    read_total: int
    lost_events: int


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    # a short root: the kernel cuts paths at 64 bytes, and a write's path is the open's, read
    # back whole from /proc only while the descriptor is open (this workload closes at once);
    # pytest's temporary directories pass 64 bytes under xdist (popen-gw0/...)
    base = Path(tempfile.mkdtemp(prefix="hps-sensor-", dir="/tmp"))
    try:
        yield _run(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(base: Path) -> Run:
    root = base / "ckpt"
    root.mkdir()
    (root / "model.pt").write_bytes(bytes(range(256)) * (SIZE // 256) + b"\0" * (SIZE % 256))
    (base / "other.txt").write_text("not protected\n")
    temp_true = base / "dropped-true"
    shutil.copy("/bin/true", temp_true)
    script = base / "workload.py"
    script.write_text(WORKLOAD)
    watch = SensorWatch(protected=(f"{root}/",), temp_prefixes=(f"{base}/",))
    program = render_program(bundled_program_path().read_text(), watch=watch)
    output = base / "tetragon.log"
    found: dict[str, Any] = {}
    with output.open("w") as out:
        sensor = Sensor(program, out, node="n-sensor", watch=watch)

        def workload() -> None:
            try:
                assert sensor.attached.wait(180), "bpftrace did not attach in 180 s"
                # a parent named like a Slurm step daemon, as job processes have one
                stepd = f'exec -a "slurmstepd: [777.batch]" {sys.executable} -c "$0" "$@"'
                inner = "import subprocess, sys; subprocess.run(sys.argv[1:], check=True)"
                done = subprocess.run(
                    ["bash", "-c", stepd, inner, sys.executable, str(script), str(root),
                     str(base / "other.txt"), str(temp_true)],
                    check=True, capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                found["read_total"] = int(done.stdout.strip())
                time.sleep(2.5)  # the last flush
            except BaseException as exc:
                found["error"] = exc
            finally:
                sensor.stop()

        thread = threading.Thread(target=workload, daemon=True)
        thread.start()
        sensor.run(duration_seconds=300)
        thread.join(timeout=30)
    if "error" in found:
        raise found["error"]
    with output.open("rb") as lines:
        result = parse_tetragon_lines(lines, source=str(output))
    assert result.errors == ()
    import orjson

    events = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    pids = {e["process_kprobe"]["process"]["pid"] for e in events if "process_kprobe" in e
            and e["process_kprobe"]["args"][0].get("file_arg", {}).get("path", "").endswith(
                "model.pt")}  # fmt: skip
    assert len(pids) == 1
    return Run(events, result.table.to_pylist(), root, pids.pop(), found["read_total"],
               sensor.stats.lost_events)  # fmt: skip


def _mine(run: Run) -> list[dict[str, Any]]:
    return [r for r in run.rows if r["pid"] == run.workload_pid]


def test_opens_reads_and_mmaps_of_the_protected_file_with_their_bytes(run: Run) -> None:
    model = [r for r in _mine(run) if r["file_path"] == f"{run.root}/model.pt"]
    functions = [r["function_name"] for r in model]
    assert functions[0] == "security_file_open" and functions.count("security_file_open") == 1
    reads = [r["int_args"][1] for r in model if r["function_name"] == "security_file_permission"]
    assert run.read_total == SIZE and sum(reads) == SIZE
    assert reads[0] == 100_000 and len(reads) >= 2  # flushed while open, then at close
    (mapped,) = [r for r in model if r["function_name"] == "security_mmap_file"]
    assert mapped["int_args"][2] == SIZE
    assert {r["job_id"] for r in model} == {"777"}
    assert {r["job_source"] for r in model} == {"sensor stepd"}
    assert {r["job_step"] for r in model} == {"batch"}
    assert {r["node_name"] for r in model} == {"n-sensor"}
    assert all(r["file_mode"] == "-rw-r--r--" for r in model)


def test_writes_are_counted_and_unprotected_files_are_silent(run: Run) -> None:
    written = [
        r["int_args"][1]
        for r in _mine(run)
        if r["file_path"] == f"{run.root}/optimizer.bin"
        and r["function_name"] == "security_file_permission"
    ]
    seen = [(r["function_name"], r["file_path"], r["int_args"]) for r in _mine(run)]
    assert written == [WRITTEN], (seen, f"{run.lost_events} events lost in the kernel")
    assert not any("other.txt" in (r["file_path"] or "") for r in run.rows)
    rows = cast(list[TetragonRow], run.rows)
    records = access_records(rows, protected=[str(run.root)]).to_pylist()
    by_access: dict[str, int] = {}
    for record in records:
        if record["pid"] == run.workload_pid:
            by_access[record["access"]] = by_access.get(record["access"], 0) + (
                record["bytes"] or 0
            )
    assert by_access == {"open": 0, "read": SIZE, "mmap": SIZE, "write": WRITTEN}


def test_temp_exec_connect_ptrace_vm_readv_and_setns(run: Run) -> None:
    execs = [r for r in run.rows if r["event_type"] == "process_exec"]
    assert any(r["binary"].endswith("/dropped-true") and r["job_id"] == "777" for r in execs)
    mine = _mine(run)
    (connect,) = [r for r in mine if r["function_name"] == "tcp_connect"]
    assert (connect["sock_daddr"], connect["sock_dport"], connect["sock_family"]) == (
        "10.255.255.1", 4444, "AF_INET")  # fmt: skip
    (own,) = [r for r in execs if r["pid"] == run.workload_pid]  # every exec is posted
    assert own["arguments"].startswith(str(run.root.parent / "workload.py"))
    assert connect["exec_id"] == own["exec_id"]  # the connect chains to its image
    calls = {r["function_name"]: r["int_args"] for r in mine}
    assert calls["__x64_sys_ptrace"] == [2, 999_999]
    assert calls["__x64_sys_process_vm_readv"] == [999_999]
    assert calls["__x64_sys_setns"] == [-1, 0x40000000]
    assert all(r["job_id"] == "777" for r in mine)
