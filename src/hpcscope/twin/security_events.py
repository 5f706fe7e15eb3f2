"""Falco alerts and Tetragon events as the real tools write them, for the twin's attacks.

Falco: one ``json_output`` object per line (``time`` RFC 3339 ns, ``rule``, ``priority``,
``output``, ``hostname``, ``source``, ``tags``, ``output_fields`` with ``evt.time`` in ns and
``thread.cgroups``, which hpcscope's Falco configuration appends). Tetragon: one export event
per line, the event type as top-level key with ``node_name`` and ``time`` (host mode: no pod,
no cgroup; the job comes from ``/proc/<pid>/cgroup``, which :class:`ProcTree` writes for the
twin's processes).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path


def rfc3339_ns(time_ns: int) -> str:
    """``2026-12-01T12:00:00.123456789Z`` for nanoseconds since the epoch."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


def slurm_cgroup(job_id: str, *, step: str = "0") -> str:
    """The cgroup v2 path of a Slurm job step's task (Slurm < 26.05 layout)."""
    return f"0::/system.slice/slurmstepd.scope/job_{job_id}/step_{step}/user/task_0"


def falco_line(
    *,
    rule: str,
    priority: str,
    time_ns: int,
    hostname: str,
    fields: dict[str, object],
    tags: list[str],
    text: str,
) -> str:
    """One Falco alert line (``json_output: true``)."""
    clock = rfc3339_ns(time_ns)[11:29]
    alert = {
        "hostname": hostname,
        "output": f"{clock}: {priority} {text}",
        "priority": priority,
        "rule": rule,
        "source": "syscall",
        "tags": tags,
        "time": rfc3339_ns(time_ns),
        "output_fields": {"evt.time": time_ns, **fields},
    }
    return json.dumps(alert, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Proc:
    """A process of the twin as Tetragon names it."""

    node: str
    pid: int
    uid: int
    binary: str
    arguments: str
    start_ns: int
    parent: Proc | None = None
    cwd: str = "/home"

    @property
    def exec_id(self) -> str:
        return base64.b64encode(f"{self.node}:{self.start_ns}:{self.pid}".encode()).decode()

    def as_json(self) -> dict[str, object]:
        process: dict[str, object] = {
            "exec_id": self.exec_id,
            "pid": self.pid,
            "uid": self.uid,
            "cwd": self.cwd,
            "binary": self.binary,
            "arguments": self.arguments,
            "flags": "execve clone",
            "start_time": rfc3339_ns(self.start_ns),
            "auid": self.uid,
            "tid": self.pid,
        }
        if self.parent is not None:
            process["parent_exec_id"] = self.parent.exec_id
        return process


def tetragon_exec(proc: Proc) -> str:
    """A ``process_exec`` export line."""
    event: dict[str, object] = {"process": proc.as_json()}
    if proc.parent is not None:
        event["parent"] = proc.parent.as_json()
    line = {"process_exec": event, "node_name": proc.node, "time": rfc3339_ns(proc.start_ns)}
    return json.dumps(line, separators=(",", ":"))


def tetragon_kprobe(
    proc: Proc, *, time_ns: int, function: str, args: list[dict[str, object]], policy: str
) -> str:
    """A ``process_kprobe`` export line (action Post)."""
    event: dict[str, object] = {
        "process": proc.as_json(),
        "function_name": function,
        "args": args,
        "action": "KPROBE_ACTION_POST",
        "policy_name": policy,
    }
    if proc.parent is not None:
        event["parent"] = proc.parent.as_json()
    line = {"process_kprobe": event, "node_name": proc.node, "time": rfc3339_ns(time_ns)}
    return json.dumps(line, separators=(",", ":"))


def file_access(proc: Proc, path: str, mask: int, *, time_ns: int) -> str:
    """``security_file_permission`` on ``path`` (mask 4 read, 2 write)."""
    return tetragon_kprobe(
        proc,
        time_ns=time_ns,
        function="security_file_permission",
        args=[{"file_arg": {"path": path, "permission": "-rw-r--r--"}}, {"int_arg": mask}],
        policy="hpcscope-weights",
    )


def tcp_connect(proc: Proc, daddr: str, dport: int, *, time_ns: int) -> str:
    """``tcp_connect`` to ``daddr:dport``."""
    sock = {
        "family": "AF_INET",
        "type": "SOCK_STREAM",
        "protocol": "IPPROTO_TCP",
        "saddr": "10.1.0.11",
        "daddr": daddr,
        "sport": 40000 + proc.pid % 20000,
        "dport": dport,
    }
    return tetragon_kprobe(
        proc, time_ns=time_ns, function="tcp_connect", args=[{"sock_arg": sock}], policy="net"
    )


@dataclass
class ProcTree:
    """``/proc/<pid>/cgroup`` of the twin's processes (what Tetragon's reader looks up)."""

    cgroups: dict[int, str] = field(default_factory=dict)

    def add(self, proc: Proc, job_id: str | None) -> Proc:
        """Put ``proc`` in ``job_id``'s cgroup (None: a host process outside every job)."""
        self.cgroups[proc.pid] = (
            slurm_cgroup(job_id) if job_id is not None else "0::/system.slice/sshd.service"
        )
        return proc

    def write(self, root: Path) -> Path:
        """Write the tree under ``root``; returns ``root``."""
        for pid, text in self.cgroups.items():
            directory = root / str(pid)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "cgroup").write_text(text + "\n", encoding="utf-8")
        return root
