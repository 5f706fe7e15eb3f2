"""Security events as hpcscope reads them: Falco alerts and Tetragon events, one row each.

These are *events*, not alerts: the alert engine (rules, deduplication, state) consumes them.
Every row keeps the raw line it came from (``raw``, with ``source_name`` and ``source_line``)
as evidence, and the Slurm job the process ran in, read from the process's cgroup path
(``security.md`` §0): ``job_<id>`` directories (cgroup v1, and v2 before Slurm 26.05 or with
``CgroupJobIdPaths=yes``) give ``job_id``; the SLUID directory of Slurm >= 26.05 (``s`` and 13
Crockford base32 characters, e.g. ``sEKNKTV3WPV500``) gives ``job_sluid``, which Slurm maps to
a job id.

Conventions: ``ts`` is UTC with microsecond precision; ``event_time_ns`` keeps the source's
nanoseconds (Falco ``evt.time``, Tetragon ``time``) for ordering and deduplication.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

import pyarrow as pa

TS = pa.timestamp("us")


@dataclass(frozen=True, slots=True)
class SlurmCgroup:
    """The Slurm job (and step) a cgroup path names.

    Attributes:
        job_id: numeric job id from a ``job_<id>`` directory, else None.
        job_sluid: the SLUID directory name (Slurm >= 26.05 cgroup/v2 default), else None.
        step: the step directory's suffix (``0``, ``batch``, ``extern``, ``interactive``), if any.
    """

    job_id: str | None
    job_sluid: str | None
    step: str | None


FALCO_PRIORITIES: tuple[str, ...] = (
    "emergency",
    "alert",
    "critical",
    "error",
    "warning",
    "notice",
    "informational",
    "debug",
)
"""Falco's priorities, most severe first; a priority's index is its syslog level (0-7)."""

_SOURCE_COLUMNS: list[pa.Field] = [
    pa.field("raw", pa.string(), nullable=False),
    pa.field("source_name", pa.string(), nullable=False),
    pa.field("source_line", pa.int64(), nullable=False),
]

_JOB_COLUMNS: list[pa.Field] = [
    pa.field("job_id", pa.string()),
    pa.field("job_sluid", pa.string()),
    pa.field("job_step", pa.string()),
]

FALCO_ALERT_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("event_time_ns", pa.int64(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("priority", pa.string(), nullable=False),
        pa.field("priority_level", pa.int8(), nullable=False),
        pa.field("hostname", pa.string()),
        pa.field("source", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("output", pa.string()),
        pa.field("uuid", pa.string()),
        pa.field("evt_type", pa.string()),
        pa.field("proc_name", pa.string()),
        pa.field("proc_exe", pa.string()),
        pa.field("proc_cmdline", pa.string()),
        pa.field("proc_pname", pa.string()),
        pa.field("proc_pexe", pa.string()),
        pa.field("proc_anames", pa.list_(pa.string())),
        pa.field("proc_tty", pa.int64()),
        pa.field("proc_pid", pa.int64()),
        pa.field("proc_ppid", pa.int64()),
        pa.field("user_name", pa.string()),
        pa.field("user_uid", pa.int64()),
        pa.field("user_loginuid", pa.int64()),
        pa.field("container_id", pa.string()),
        pa.field("container_name", pa.string()),
        pa.field("container_image", pa.string()),
        pa.field("container_mounts", pa.string()),
        pa.field("pod_namespace", pa.string()),
        pa.field("pod_name", pa.string()),
        pa.field("evt_flags", pa.string()),
        pa.field("fd_name", pa.string()),
        pa.field("fd_l4proto", pa.string()),
        pa.field("fd_cip", pa.string()),
        pa.field("fd_cport", pa.int64()),
        pa.field("fd_sip", pa.string()),
        pa.field("fd_sport", pa.int64()),
        pa.field("fd_rip", pa.string()),
        pa.field("fd_rport", pa.int64()),
        pa.field("target_pid", pa.int64()),
        pa.field("cgroups", pa.string()),
        *_JOB_COLUMNS,
        *_SOURCE_COLUMNS,
    ]
)
"""One row per Falco alert. ``priority`` is Falco's, lower-cased (:data:`FALCO_PRIORITIES`);
``priority_level`` its syslog level (0 emergency .. 7 debug). Process, file and connection
columns are null when the rule's output did not carry the field or Falco could not resolve it
(``<NA>``). ``target_pid`` is ``evt.arg.pid`` (the traced process of a ptrace or
``process_vm_readv`` alert). ``proc_anames`` are the ancestors' names from the parent up
(``proc.pname``, then ``proc.aname[2]``, ``proc.aname[3]``... as far as the output carried
them, unresolved ones left out); ``proc_pexe`` the parent's executable path
(``proc.pexepath``/``proc.pexe``); ``container_mounts`` Falco's ``container.mounts``
(``source:dest:mode:rdwr:propagation`` items joined by commas); ``evt_flags``
``evt.arg.flags`` (``EXE_UPPER_LAYER``, ``O_WRONLY|O_CREAT``...); ``pod_namespace`` and
``pod_name`` ``k8s.ns.name`` and ``k8s.pod.name``."""

TETRAGON_EVENT_TYPES: tuple[str, ...] = (
    "process_exec",
    "process_exit",
    "process_kprobe",
    "process_tracepoint",
    "process_lsm",
    "process_connect",
    "process_listen",
    "process_close",
)
"""The event types mapped column by column; others keep type, node, time and the raw line.
``process_connect``, ``process_listen`` and ``process_close`` are the legacy network events of
older Isovalent exports (their addresses go to the ``sock_*`` columns)."""

MAY_WRITE = 2
MAY_READ = 4

TETRAGON_EVENT_SCHEMA = pa.schema(
    [
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("ts", TS),
        pa.field("event_time_ns", pa.int64()),
        pa.field("node_name", pa.string()),
        pa.field("exec_id", pa.string()),
        pa.field("parent_exec_id", pa.string()),
        pa.field("pid", pa.int64()),
        pa.field("tid", pa.int64()),
        pa.field("uid", pa.int64()),
        pa.field("auid", pa.int64()),
        pa.field("binary", pa.string()),
        pa.field("arguments", pa.string()),
        pa.field("cwd", pa.string()),
        pa.field("flags", pa.string()),
        pa.field("parent_binary", pa.string()),
        pa.field("container_id", pa.string()),
        pa.field("container_name", pa.string()),
        pa.field("pod_namespace", pa.string()),
        pa.field("pod_name", pa.string()),
        pa.field("function_name", pa.string()),
        pa.field("policy_name", pa.string()),
        pa.field("action", pa.string()),
        pa.field("file_path", pa.string()),
        pa.field("file_mode", pa.string()),
        pa.field("entry_path", pa.string()),
        pa.field("access_mask", pa.int64()),
        pa.field("int_args", pa.list_(pa.int64())),
        pa.field("string_arg", pa.string()),
        pa.field("cred_uid", pa.int64()),
        pa.field("cred_euid", pa.int64()),
        pa.field("module_name", pa.string()),
        pa.field("module_tainted", pa.list_(pa.string())),
        pa.field("sock_family", pa.string()),
        pa.field("sock_protocol", pa.string()),
        pa.field("sock_saddr", pa.string()),
        pa.field("sock_sport", pa.int64()),
        pa.field("sock_daddr", pa.string()),
        pa.field("sock_dport", pa.int64()),
        pa.field("return_int", pa.int64()),
        pa.field("exit_status", pa.int64()),
        pa.field("exit_signal", pa.string()),
        *_JOB_COLUMNS,
        pa.field("job_source", pa.string()),
        *_SOURCE_COLUMNS,
    ]
)
"""One row per Tetragon event. ``file_path``/``file_mode`` come from the first ``file_arg`` or
``path_arg`` (``file_mode`` is Tetragon's ``permission`` string, e.g. ``-rw-r--r--``),
``entry_path`` from the second (``security_path_unlink``'s dentry, printed up to its mount
point); ``string_arg`` is the first ``string_arg`` (a requested module's name);
``cred_uid``/``cred_euid`` the new credentials of a ``process_credentials_arg``
(``commit_creds``); ``module_name``/``module_tainted`` a ``module_arg`` (``do_init_module``:
the taint flags, e.g. ``TAINT_UNSIGNED_MODULE``); ``function_name`` is a tracepoint's
``event``;
``access_mask`` is the ``int`` argument of ``security_file_permission`` (:data:`MAY_READ` 4,
:data:`MAY_WRITE` 2). ``job_source`` says how the job was found: ``cgroup`` (read from
``/proc/<pid>/cgroup``), ``parent`` (the process was gone: its parent's job), ``sensor cgroup``
or ``sensor stepd`` (resolved by ``hpcscope sensor`` while the process was alive), or null."""


class FalcoRow(TypedDict):
    """One row of :data:`FALCO_ALERT_SCHEMA` as Arrow's ``to_pylist`` gives it (the event rules
    read these; a test keeps the keys equal to the schema's)."""

    ts: datetime
    event_time_ns: int
    rule: str
    priority: str
    priority_level: int
    hostname: str | None
    source: str | None
    tags: list[str] | None
    output: str | None
    uuid: str | None
    evt_type: str | None
    proc_name: str | None
    proc_exe: str | None
    proc_cmdline: str | None
    proc_pname: str | None
    proc_pexe: str | None
    proc_anames: list[str] | None
    proc_tty: int | None
    proc_pid: int | None
    proc_ppid: int | None
    user_name: str | None
    user_uid: int | None
    user_loginuid: int | None
    container_id: str | None
    container_name: str | None
    container_image: str | None
    container_mounts: str | None
    pod_namespace: str | None
    pod_name: str | None
    evt_flags: str | None
    fd_name: str | None
    fd_l4proto: str | None
    fd_cip: str | None
    fd_cport: int | None
    fd_sip: str | None
    fd_sport: int | None
    fd_rip: str | None
    fd_rport: int | None
    target_pid: int | None
    cgroups: str | None
    job_id: str | None
    job_sluid: str | None
    job_step: str | None
    raw: str
    source_name: str
    source_line: int


class TetragonRow(TypedDict):
    """One row of :data:`TETRAGON_EVENT_SCHEMA` as Arrow's ``to_pylist`` gives it (the event
    rules read these; a test keeps the keys equal to the schema's)."""

    event_type: str
    ts: datetime | None
    event_time_ns: int | None
    node_name: str | None
    exec_id: str | None
    parent_exec_id: str | None
    pid: int | None
    tid: int | None
    uid: int | None
    auid: int | None
    binary: str | None
    arguments: str | None
    cwd: str | None
    flags: str | None
    parent_binary: str | None
    container_id: str | None
    container_name: str | None
    pod_namespace: str | None
    pod_name: str | None
    function_name: str | None
    policy_name: str | None
    action: str | None
    file_path: str | None
    file_mode: str | None
    entry_path: str | None
    access_mask: int | None
    int_args: list[int] | None
    string_arg: str | None
    cred_uid: int | None
    cred_euid: int | None
    module_name: str | None
    module_tainted: list[str] | None
    sock_family: str | None
    sock_protocol: str | None
    sock_saddr: str | None
    sock_sport: int | None
    sock_daddr: str | None
    sock_dport: int | None
    return_int: int | None
    exit_status: int | None
    exit_signal: str | None
    job_id: str | None
    job_sluid: str | None
    job_step: str | None
    job_source: str | None
    raw: str
    source_name: str
    source_line: int
