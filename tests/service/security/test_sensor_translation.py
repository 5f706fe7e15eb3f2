"""The sensor's records -> Tetragon events on a fake /proc tree (no kernel needed): the job
from a cgroup, from a ``slurmstepd`` ancestor, or from the parent of a process already gone;
opens, dup'ed descriptors, flushes and closes summed; connects inside the cluster posted for
job processes only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.ingest.security.tetragon import tetragon_event_row
from hpcscope.service.security.sensor_events import SensorTranslator
from hpcscope.service.security.sensor_procs import CLOCK_TICKS, ProcReader
from hpcscope.service.security.sensor_watch import SensorWatch


def _proc(root: Path, pid: int, ppid: int, cmdline: str, cgroup: str = "0::/user.slice") -> None:
    base = root / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} (x y) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                               f"{CLOCK_TICKS * 5} 0 0\n")  # fmt: skip
    (base / "cmdline").write_text(cmdline.replace(" ", "\0") + "\0")
    (base / "cgroup").write_text(cgroup + "\n")
    (base / "status").write_text("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n")


def _tree(root: Path) -> Path:
    _proc(root, 10, 1, "slurmstepd: [42.batch]")
    _proc(root, 11, 10, "/bin/bash /spool/slurm_script")
    _proc(
        root,
        20,
        1,
        "python3 train.py",
        "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0",
    )
    _proc(root, 30, 1, "sshd: admin")
    return root


def _rows(events: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    return [tetragon_event_row(orjson.dumps(e), source="s", line_number=i)
            for i, e in enumerate(events, start=1)]  # fmt: skip


def test_jobs_from_cgroup_stepd_ancestor_and_parent_of_a_gone_process(tmp_path: Path) -> None:
    reader = ProcReader(node="n1", proc_root=_tree(tmp_path))
    watch = SensorWatch(protected=("/ckpt/",), cluster_cidrs=("10.0.0.0/8",))
    translator = SensorTranslator(
        reader, node="n1", monotonic_to_wall_ns=1_796_126_400 * 10**9, watch=watch
    )
    events = translator.feed_all([
        SensorRecord("open", ns=1, pid=20, tid=20, uid=1000, ppid=1, fd=3, flags=0, comm="python3",
                     path="/ckpt/a/model.pt"),
        # pid 99 (a dd of the job script, pid 11) is gone before /proc is read
        SensorRecord("open", ns=2, pid=99, tid=99, uid=1000, ppid=11, fd=4, flags=0, comm="dd",
                     path="/ckpt/a/model.pt"),
        SensorRecord("dup", ns=3, pid=99, tid=99, uid=1000, ppid=11, fd=4, target_fd=0),
        SensorRecord("bytes", pid=99, fd=0, read_bytes=1000),
        SensorRecord("close", ns=4, pid=99, tid=99, uid=1000, ppid=11, fd=0, read_bytes=24,
                     written_bytes=0, comm="dd"),
        SensorRecord("connect", ns=5, pid=30, tid=30, uid=0, ppid=1, family=2, port=443,
                     comm="sshd", address="10.1.2.3", sock_type=1, protocol=6),
        SensorRecord("connect", ns=6, pid=20, tid=20, uid=1000, ppid=1, family=2, port=443,
                     comm="python3", address="10.1.2.3", sock_type=1, protocol=6),
        SensorRecord("connect", ns=7, pid=30, tid=30, uid=0, ppid=1, family=10, port=443,
                     comm="sshd", address="2001:db8::1", sock_type=1, protocol=6),
    ])  # fmt: skip
    rows = _rows(events)
    opens = [r for r in rows if r["function_name"] == "security_file_open"]
    assert [(r["pid"], r["job_id"], r["job_source"]) for r in opens] == [
        (20, "77", "sensor cgroup"), (99, "42", "sensor parent stepd")]  # fmt: skip
    reads = [r for r in rows if r["function_name"] == "security_file_permission"]
    assert [(r["pid"], r["int_args"]) for r in reads] == [(99, [4, 1000]), (99, [4, 24])]
    assert all(r["file_path"] == "/ckpt/a/model.pt" for r in reads)
    # inside the cluster: a job's connect is posted (W-2, SC-6), another is not; outside: all
    connects = [r for r in rows if r["function_name"] == "tcp_connect"]
    assert [(r["pid"], r["sock_daddr"], r["sock_dport"], r["sock_family"]) for r in connects] == [
        (20, "10.1.2.3", 443, "AF_INET"), (30, "2001:db8::1", 443, "AF_INET6")]  # fmt: skip
    assert {r["policy_name"] for r in connects} == {"hpcscope-network"}
    assert translator.stats.skipped_connects == 1
    assert rows[0]["event_time_ns"] == 1_796_126_400 * 10**9 + 1  # monotonic ns + the offset


def test_a_process_under_a_step_daemon_has_its_job(tmp_path: Path) -> None:
    reader = ProcReader(node="n1", proc_root=_tree(tmp_path))
    job = reader.job(11)
    assert job is not None and (job.job_id, job.step, job.source) == ("42", "batch", "stepd")
    assert reader.job(30) is None
    info = reader.process(11)
    assert info.alive and info.ppid == 10 and info.uid == 1000 and info.start_ns == 5 * 10**9
    assert info.arguments == "/spool/slurm_script"
