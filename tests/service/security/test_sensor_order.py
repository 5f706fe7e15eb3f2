"""The sensor's records back in kernel order (bpftrace prints one CPU's ring after another):
a ``dd`` whose close reached user space before its open still has its bytes counted, and a
process gone before its held record is translated keeps the job read when it arrived."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.ingest.security.tetragon import tetragon_event_row
from hpcscope.service.security.sensor_events import SensorTranslator
from hpcscope.service.security.sensor_order import KernelOrder
from hpcscope.service.security.sensor_procs import ProcessJob, ProcReader
from tests.service.security.test_sensor_translation import _proc

MS = 1_000_000


def _dd_records() -> list[SensorRecord]:
    """dd if=/ckpt/a/model.pt: open (fd 3), dup2 to 0, a flushed byte map, close of 0."""
    return [
        SensorRecord("open", ns=10 * MS, pid=99, tid=99, uid=1000, ppid=11, fd=3, flags=0,
                     comm="dd", path="/ckpt/a/model.pt"),
        SensorRecord("dup", ns=11 * MS, pid=99, tid=99, uid=1000, ppid=11, fd=3, target_fd=0),
        SensorRecord("close", ns=12 * MS, pid=99, tid=99, uid=1000, ppid=11, fd=3,
                     read_bytes=0, written_bytes=0, comm="dd"),
        SensorRecord("close", ns=40 * MS, pid=99, tid=99, uid=1000, ppid=11, fd=0,
                     read_bytes=3 * 2**20, written_bytes=0, comm="dd"),
    ]  # fmt: skip


def _translator(root: Path) -> SensorTranslator:
    _proc(root, 10, 1, "slurmstepd: [42.batch]")
    _proc(root, 11, 10, "/bin/bash /spool/slurm_script")
    _proc(root, 99, 11, "dd if=/ckpt/a/model.pt of=/dev/null")
    return SensorTranslator(ProcReader(node="n1", proc_root=root), node="n1",
                            monotonic_to_wall_ns=0)  # fmt: skip


def _read_rows(events: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    rows = [tetragon_event_row(orjson.dumps(e), source="s", line_number=i)
            for i, e in enumerate(events, start=1)]  # fmt: skip
    return [r for r in rows if r["function_name"] == "security_file_permission"]


def test_rings_read_out_of_order_still_count_the_bytes(tmp_path: Path) -> None:
    records = _dd_records()
    arrived = [records[3], records[1], records[0], records[2]]  # CPU 1's ring first
    # as before: records translated in arrival order lose the read
    assert _read_rows(_translator(tmp_path / "a").feed_all(arrived)) == []

    translator = _translator(tmp_path / "b")
    order = KernelOrder(hold_ns=100 * MS)
    for record in arrived:
        translator.observe(record)
        order.push([record], arrival_ns=45 * MS)
    assert order.pop_ready(100 * MS) == []  # still held
    shutil.rmtree(tmp_path / "b" / "99")  # dd exits while its records wait
    events = translator.feed_all(order.pop_ready(146 * MS))
    reads = _read_rows(events)
    assert [(r["pid"], r["job_id"], r["job_source"], r["int_args"]) for r in reads] == [
        (99, "42", "sensor stepd", [4, 3 * 2**20])
    ]  # the job read while dd was alive
    assert reads[0]["file_path"] == "/ckpt/a/model.pt"


def test_a_byte_map_takes_its_arrival_time(tmp_path: Path) -> None:
    order = KernelOrder(hold_ns=0)
    flushed = SensorRecord("bytes", pid=99, fd=0, read_bytes=5)
    order.push([flushed], arrival_ns=30 * MS)
    order.push(_dd_records()[:2], arrival_ns=31 * MS)
    released = order.pop_ready(31 * MS)
    assert [r.kind for r in released] == ["open", "dup", "bytes"]
    assert released[2].ns == 30 * MS


def test_a_record_later_than_the_hold_goes_after_what_was_released() -> None:
    order = KernelOrder(hold_ns=10 * MS)
    order.push([SensorRecord("exit", ns=50 * MS, pid=1)], arrival_ns=50 * MS)
    assert [r.ns for r in order.pop_ready(70 * MS)] == [50 * MS]
    order.push([SensorRecord("exit", ns=20 * MS, pid=2), SensorRecord("exit", ns=65 * MS, pid=3)],
               arrival_ns=70 * MS)  # fmt: skip
    assert [r.pid for r in order.pop_ready(80 * MS)] == [2, 3]
    assert order.drain() == [] and len(order) == 0


def test_a_negative_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="hold_ns"):
        KernelOrder(hold_ns=-1)


@given(
    st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 200 * MS)), max_size=60),
    st.integers(0, 100 * MS),
)
def test_records_within_the_hold_come_out_in_kernel_order(
    events: list[tuple[int, int]], hold_ns: int
) -> None:
    """Each record arrives up to ``delay`` after its kernel time; those whose delay is within
    the hold are released sorted, and nothing is lost or repeated."""
    order = KernelOrder(hold_ns=hold_ns)
    arrivals = sorted((ns + delay, ns, i) for i, (ns, delay) in enumerate(events))
    released: list[SensorRecord] = []
    for arrival_ns, ns, i in arrivals:
        released += order.pop_ready(arrival_ns)
        order.push([SensorRecord("exit", ns=ns, pid=i)], arrival_ns=arrival_ns)
    released += order.drain()
    assert sorted(r.pid or 0 for r in released) == list(range(len(events)))
    if all(delay <= hold_ns for _, delay in events):
        assert [r.ns for r in released] == sorted(ns for ns, _ in events)


def test_a_process_exiting_while_read_has_its_parents_job(tmp_path: Path) -> None:
    """Read while it exits (its stat, then nothing): the walk from it is cut; the event's
    parent is in the job, and so is the process (a child is in its parent's job)."""
    root = tmp_path / "proc"
    _proc(root, 10, 1, "slurmstepd: [42.batch]")
    _proc(root, 11, 10, "/bin/bash /spool/slurm_script")
    _proc(root, 99, 11, "dd")

    class ExitingReader(ProcReader):
        def job(self, pid: int) -> ProcessJob | None:
            if pid == 99:
                shutil.rmtree(root / "99", ignore_errors=True)  # dd is reaped now
            return super().job(pid)

    info = ExitingReader(node="n1", proc_root=root).process(99, ppid=11)
    assert info.job is not None
    assert (info.job.job_id, info.job.source) == ("42", "parent stepd")
    # a process that is there and in no job stays in none (the walk was complete)
    _proc(root, 30, 1, "sshd: admin")
    assert ProcReader(node="n1", proc_root=root).process(30, ppid=1).job is None


def test_an_exec_read_on_arrival_keeps_its_job_after_its_ancestors_exit(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    translator = _translator(root)
    exec_record = SensorRecord("exec", ns=5 * MS, pid=99, tid=99, uid=1000, ppid=11,
                               path="/tmp/dropped-true")  # fmt: skip
    translator.observe(exec_record)
    for pid in ("11", "10"):
        shutil.rmtree(root / pid)  # its ancestors exit during the hold; it still runs
    (event,) = translator.feed(exec_record)
    process = orjson.loads(orjson.dumps(event))["process_exec"]["process"]
    assert process["slurm_job"]["job_id"] == "42"
