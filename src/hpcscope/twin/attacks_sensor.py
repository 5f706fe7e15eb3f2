"""Twin scenarios for the sensor's rules: W-2 (weights read, then egress) and SC-6.

The lines are what ``hpcscope sensor`` writes (Tetragon export events, the bytes read in a
``size_arg`` each second), with the ``/proc/<pid>/cgroup`` of the processes; the ground truth
is in each :class:`~hpcscope.twin.attacks.Scenario` (its fields unchanged). Replayed by
``bench/detection_quality.py`` with the scenarios of :mod:`hpcscope.twin.attacks`.
"""

from __future__ import annotations

from collections.abc import Callable

from hpcscope.twin.attacks import CHECKPOINTS, NODE, SECOND_NS, Scenario, _python
from hpcscope.twin.security_events import (
    Proc,
    file_access,
    tcp_connect,
    tetragon_exec,
    tetragon_kprobe,
)

GIB = 2**30
CHUNK_BYTES = 512 * 2**20  # what the sensor reports for a second of a fast read


def sensor_read(proc: Proc, path: str, size: int, *, time_ns: int, mode: str = "-rw-r--r--") -> str:
    """The sensor's bytes-read event: ``security_file_permission`` with MAY_READ and a size."""
    return tetragon_kprobe(
        proc,
        time_ns=time_ns,
        function="security_file_permission",
        args=[{"file_arg": {"path": path, "permission": mode}}, {"int_arg": 4},
              {"size_arg": str(size)}],
        policy="hpcscope-sensor",
    )  # fmt: skip


def _bulk_read(proc: Proc, path: str, total: int, t0: int) -> list[str]:
    lines, done, second = [], 0, 0
    while done < total:
        size = min(CHUNK_BYTES, total - done)
        lines.append(sensor_read(proc, path, size, time_ns=t0 + second * SECOND_NS))
        done, second = done + size, second + 1
    return lines


def weights_then_egress(t0: int) -> Scenario:
    """bob's job reads 3 GiB of alice's checkpoint in 6 s, then connects out of the cluster
    5 min later (weights exfiltration): W-1, SC-3 and their correlation W-2."""
    s = Scenario("weights-read-then-egress", benign=False, job_id="4410002")
    writer = _python(s, t0)
    thief = _python(s, t0, job="4410002", pid=2251)
    shard = f"{CHECKPOINTS}/run-x/step-900/model.safetensors"
    s.tetragon = [
        tetragon_exec(writer),
        tetragon_exec(thief),
        file_access(writer, shard, 2, time_ns=t0 + SECOND_NS),
        *_bulk_read(thief, shard, 3 * GIB, t0 + 60 * SECOND_NS),
        tcp_connect(thief, "203.0.113.50", 443, time_ns=t0 + 360 * SECOND_NS),
    ]
    s.expected = {"W-1": 1, "SC-3": 1, "W-2": 1}
    s.severities = {"W-2": "CRITICAL"}
    return s


def bulk_own_reads_inside_cluster(t0: int) -> Scenario:
    """alice's eval job reads 3 GiB of her own account's checkpoint and talks to its peers
    inside the cluster: no egress, no W-2."""
    s = Scenario("benign-bulk-own-reads", benign=True)
    writer = _python(s, t0)
    evaluator = _python(s, t0, job="4410006", pid=3051)
    shard = f"{CHECKPOINTS}/run-y/step-10/model.safetensors"
    s.tetragon = [
        tetragon_exec(writer),
        tetragon_exec(evaluator),
        file_access(writer, shard, 2, time_ns=t0 + SECOND_NS),
        *_bulk_read(evaluator, shard, 3 * GIB, t0 + 30 * SECOND_NS),
        tcp_connect(evaluator, "10.1.0.12", 29500, time_ns=t0 + 60 * SECOND_NS),
    ]
    return s


def pickle_from_tmp_spawns(t0: int) -> Scenario:
    """A job loads ``/tmp/model.pt`` (a pickle anyone could have written) and the loading
    process runs ``id`` 2 s later: code ran at load (SC-6)."""
    s = Scenario("pickle-from-tmp-spawns", benign=False)
    python = _python(s, t0)
    child = s.proc.add(
        Proc(NODE, 2261, 1000, "/usr/bin/id", "", t0 + 3 * SECOND_NS, python), "4410001"
    )
    s.tetragon = [
        tetragon_exec(python),
        tetragon_kprobe(
            python,
            time_ns=t0 + SECOND_NS,
            function="security_file_open",
            args=[
                {"file_arg": {"path": "/tmp/model.pt", "permission": "-rw-rw-rw-"}},
                {"int_arg": 0},
            ],
            policy="hpcscope-sensor",
        ),
        tetragon_exec(child),
    ]
    s.expected = {"SC-6": 1}
    return s


def checkpoint_load_then_jit(t0: int) -> Scenario:
    """A job loads its checkpoint from the (not world-writable) checkpoint root and compiles
    kernels right after (``gcc``): no SC-6."""
    s = Scenario("benign-checkpoint-load-jit", benign=True)
    python = _python(s, t0)
    gcc = s.proc.add(
        Proc(NODE, 3061, 1000, "/usr/bin/gcc", "-O3 -shared k.c", t0 + 2 * SECOND_NS, python),
        "4410001",
    )
    shard = f"{CHECKPOINTS}/run-z/step-1/model.pt"
    s.tetragon = [
        tetragon_exec(python),
        sensor_read(python, shard, 2**20, time_ns=t0 + SECOND_NS),
        tetragon_exec(gcc),
    ]
    return s


SENSOR_SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    weights_then_egress,
    bulk_own_reads_inside_cluster,
    pickle_from_tmp_spawns,
    checkpoint_load_then_jit,
)


def sensor_scenarios(t0: int) -> list[Scenario]:
    """Every scenario of this module, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in SENSOR_SCENARIOS]
