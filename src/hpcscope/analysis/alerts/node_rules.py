"""Node rules over Tetragon events: suspicious on a compute node, in a job or not.

An HPC node also runs containers, login shells and daemons outside Slurm, and an attacker who
escapes a job is no longer in it: these rules fire on the node whatever owns the process, and
the alert carries the job, user and account when the event's job resolves (the common
attribution of :func:`~hpcscope.analysis.alerts.common.event_alert`). The event shapes they
read are the contract of ``docs/security.md`` ("Tetragon event shapes the rules read");
``hpcscope sensor`` writes the same.

- SC-2: exec of a binary under a temp directory (HIGH); **CRITICAL** when the same ``exec_id``
  connects within ``connect_window_seconds``; a child of such a binary is raised too (the
  binary's subject: a C2 agent spawning ``sh -c 7z``...).
- SC-3: a connection outside ``cluster_cidrs`` (CRITICAL on ``miner_ports``), from a kprobe's
  ``sock_arg`` or a legacy ``process_connect``; and the exec of a remote-copy tool (``scp``,
  ``rsync``, ``ssh``...) whose arguments name an address outside them.
- CE-4 also reads ``write``/``read`` syscall kprobes whose file argument is a followed fd.
- SC-8: a shell or netcat-like tool that connects: HIGH when its command line hands the
  socket a shell (``nc -e``, ``bash -i >& /dev/tcp/...``) or the peer is outside the site's
  networks (then CRITICAL), MEDIUM otherwise (a health check through ``/dev/tcp``); a
  netcat-like exec alone is MEDIUM (HIGH with ``-e``/``-c``).
- CE-2: an NVIDIA container hook (``toolkit_binaries``) whose command line sets
  ``LD_PRELOAD``/``LD_LIBRARY_PATH`` (``env_vars``; ``env LD_PRELOAD=... nvidia-ctk`` too:
  Tetragon's exec carries no environment unless the policy asks): the rule's severity in a
  job, a container or a pod, or with ``LD_PRELOAD`` (the NVIDIAScape path: the hook runs as
  host root with the image's environment); HIGH for a library path set on the bare host.
- CE-1: a kernel module loaded with taint flags (CRITICAL), read from outside the module tree
  or by a process in a container or job (HIGH), requested by a container or job (MEDIUM);
  ``release_agent`` written (CRITICAL).
- CE-3: ``nsenter`` targeting PID 1 (HIGH), ``setns`` by it or by a container or job process
  that is not a container starter, and every process started under such an ``nsenter`` (one
  alert: the escape's subject).
- CE-4: a write under ``sensitive_write_prefixes`` by a binary not in ``sensitive_writers``,
  a read of ``secret_paths`` by a binary not in ``secret_readers`` (HIGH anywhere); a job
  writing ``host_only_prefixes``.
- CE-6: credentials changed to uid 0 (``commit_creds``, ``setuid``...) for a process whose own
  uid is not 0, its binary not one of ``privilege_tools`` (HIGH; CRITICAL from a temp
  directory).
- DP-6: a file removed under a dataset root (HIGH).
- RD-8: a packet (AF_PACKET) or raw socket opened by a binary not in ``raw_socket_tools``:
  HIGH in a container or job, MEDIUM on the host.

Pure: no I/O, no clock; state (the exec tree, temp execs) bounded.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hpcscope.analysis.alerts.common import (
    JobOwner,
    basename,
    contains_any,
    event_alert,
    event_time,
    in_networks,
    networks,
    under,
)
from hpcscope.model.alerts import Alert, RuleSpec, Severity
from hpcscope.model.file_access import FILE_HOOKS, TRUNCATE_HOOKS, file_access_kind
from hpcscope.model.security_events import TetragonRow

Row = TetragonRow

MAX_EXECS = 65_536
AF_PACKET = 17
SOCK_RAW = 3
READING_MODULE = 2
_SYSCALL_PREFIXES = (
    "__x64_sys_", "__arm64_sys_", "__ia32_sys_", "__se_sys_", "__do_sys_", "__sys_",
    "sys_enter_", "sys_",
)  # fmt: skip
_PID1 = (" -t 1 ", " -t1 ", " --target 1 ", " --target=1 ")
_SHELL_HANDOFF = (" -e ", " -c ", " --exec", " --sh-exec", " exec:", " EXEC:", " -i ")
_STDIO_REDIRECT = (">&", "0>&1", "0<&", "<&", ">/dev/tcp", "</dev/tcp")
_CONNECT_EVENTS = frozenset({"process_connect"})
_NOT_CONNECT = ("close", "accept", "listen")  # socket hooks that are not a connection out
_UNLINK = frozenset({"security_path_unlink", "security_inode_unlink", "unlink", "unlinkat"})
_SOCKET = frozenset({"security_socket_create", "__sock_create", "socket"})
_CREDS = frozenset({"commit_creds"})
_SETUID = frozenset({"setuid", "setreuid", "setresuid", "setfsuid"})
_SETNS = frozenset({"setns"})
_LSM_FILE = frozenset({"file_open", "file_permission"})
# syscalls whose file argument (a followed fd) is written or read
_WRITES = frozenset({"write", "pwrite64", "writev", "pwritev", "pwritev2"})
_READS = frozenset({"read", "pread64", "readv", "preadv", "preadv2"})


def syscall_name(function: str | None) -> str:
    """A hook's name without its architecture or tracepoint prefix (``__x64_sys_setns``,
    ``sys_enter_setns``, ``sys_setns`` -> ``setns``); other hooks unchanged."""
    if not function:
        return ""
    for prefix in _SYSCALL_PREFIXES:
        if function.startswith(prefix):
            return function[len(prefix) :]
    return function


@dataclass
class Proc:
    """What the node rules remember of one exec."""

    name: str
    binary: str
    parent: str | None
    ts: datetime
    escape: str | None = None  # the nsenter into PID 1 this process descends from
    temp_origin: str | None = None  # the temp-directory binary it is or descends from


@dataclass
class NodeState:
    """The exec tree (newest :data:`MAX_EXECS`), bounded."""

    procs: OrderedDict[str, Proc] = field(default_factory=OrderedDict)

    def remember(self, exec_id: str, proc: Proc) -> None:
        self.procs[exec_id] = proc
        self.procs.move_to_end(exec_id)
        while len(self.procs) > MAX_EXECS:
            self.procs.popitem(last=False)


def _addresses(args: str) -> list[str]:
    """IP literals in a command line (``user@34.116.205.187:~``, ``-- 10.0.0.1``)."""
    found: list[str] = []
    for token in args.replace("@", " ").replace("=", " ").split():
        host = token.split(":", 1)[0] if token.count(":") == 1 else token
        host = host.strip("[]\"'")
        if host[:1].isdigit() or ":" in host:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                continue
            found.append(host)
    return found


def _in_container(row: Row) -> bool:
    return bool(row.get("container_id") or row.get("pod_name"))


def _command(row: Row) -> str:
    return f"{row.get('binary') or ''} {row.get('arguments') or ''}".strip()


class NodeRules:
    """The node rules of one engine, with their state (see the module docstring)."""

    def __init__(
        self,
        rules: Mapping[str, RuleSpec],
        *,
        checkpoint_roots: tuple[str, ...] = (),
        dataset_roots: tuple[str, ...] = (),
    ) -> None:
        self.rules = {k: v for k, v in rules.items() if v.enabled}
        self._lists: dict[tuple[str, str], tuple[str, ...]] = {}
        self.dataset_roots = tuple(r.rstrip("/") for r in dataset_roots if r.strip("/"))
        self.state = NodeState()
        sc3 = self.rules.get("SC-3")
        self._cluster = networks(sc3.items("cluster_cidrs")) if sc3 else ()
        self._proxies = set(sc3.items("approved_proxies")) if sc3 else set()
        self._resolvers = set(sc3.items("resolvers")) if sc3 else set()
        self._owners: Mapping[str, JobOwner] = {}
        self._found: list[Alert] = []

    def evaluate(self, rows: list[TetragonRow], *, owners: Mapping[str, JobOwner]) -> list[Alert]:
        """Alerts the rows raise, in row order (not merged)."""
        self._owners, self._found = owners, []
        for row in rows:
            if row.get("ts") is None:
                continue
            kind = row["event_type"]
            if kind == "process_exec":
                self._exec(row)
            elif kind in _CONNECT_EVENTS:
                if row.get("sock_daddr"):
                    self._connect(row)
            elif kind in ("process_kprobe", "process_tracepoint", "process_lsm"):
                self._hook(row)
        return self._found

    # ---------------------------------------------------------------- helpers

    def _items(self, rule_id: str, name: str) -> tuple[str, ...]:
        """A rule's list (read once: the rules do not change while the engine runs)."""
        found = self._lists.get((rule_id, name))
        if found is None:
            spec = self.rules.get(rule_id)
            found = self._lists[(rule_id, name)] = spec.items(name) if spec is not None else ()
        return found

    def _fire(
        self,
        rule_id: str,
        row: Row,
        subject: str,
        summary: str,
        severity: Severity | None = None,
    ) -> None:
        spec = self.rules.get(rule_id)
        if spec is None:
            return
        uid = row.get("uid")
        self._found.append(
            event_alert(
                spec,
                row,
                node=row.get("node_name"),
                owners=self._owners,
                subject=subject,
                summary=f"Tetragon {row['event_type']}: {summary}",
                event_user=None if uid is None else f"uid {uid}",
                severity=severity,
            )
        )

    def _temp(self, binary: str | None) -> bool:
        if not binary:
            return False
        temp = under(binary, self._items("SC-2", "temp_prefixes")) or contains_any(
            binary, self._items("SC-2", "temp_substrings")
        )
        return temp and not contains_any(binary, self._items("SC-2", "known_temp_substrings"))

    def _outside(self, address: str | None) -> bool:
        return address not in self._proxies and in_networks(address, self._cluster) is False

    # ---------------------------------------------------------------- process_exec

    def _exec(self, row: Row) -> None:
        binary, args = row.get("binary") or "", f" {row.get('arguments') or ''} "
        name, exec_id = basename(binary), row.get("exec_id")
        parent = self.state.procs.get(row.get("parent_exec_id") or "")
        proc = Proc(name, binary, row.get("parent_exec_id"), event_time(row))
        if parent is not None:
            proc.escape, proc.temp_origin = parent.escape, parent.temp_origin
        if self._temp(row.get("parent_binary")) and proc.temp_origin is None:
            proc.temp_origin = str(row.get("parent_binary"))
        command = _command(row)
        if name in ("nsenter",) and any(flag in args for flag in _PID1):
            proc.escape = binary
            self._fire("CE-3", row, name, f"{command}: PID 1's namespaces entered")
        elif proc.escape is not None:
            summary = f"{command} started under {proc.escape} in PID 1's namespaces"
            self._fire("CE-3", row, basename(proc.escape), summary)
        if self._temp(binary):
            proc.temp_origin = binary
            self._fire("SC-2", row, binary, f"exec of {command}")
        elif proc.temp_origin is not None:
            summary = f"{command} started by {proc.temp_origin}, run from a temp directory"
            self._fire("SC-2", row, proc.temp_origin, summary)
        if name in self._items("SC-3", "remote_copy_tools"):
            for address in _addresses(args):
                if self._outside(address):
                    summary = f"{command}: a copy or session towards {address}"
                    self._fire("SC-3", row, address, summary)
                    break
        self._toolkit_hook(row, command)
        tools = self._items("SC-8", "netcat_tools")
        if name in tools:
            handoff = any(flag in args for flag in _SHELL_HANDOFF)
            severity = Severity.HIGH if handoff else Severity.MEDIUM
            self._fire("SC-8", row, name, f"exec of {command}", severity)
        if exec_id:
            self.state.remember(exec_id, proc)

    def _toolkit_hook(self, row: Row, command: str) -> None:
        """CE-2 (the module docstring)."""
        tokens = command.split()
        hooks = self._items("CE-2", "toolkit_binaries")
        hook = next((basename(t) for t in tokens if basename(t) in hooks), None)
        variables = [v for v in self._items("CE-2", "env_vars") if v]
        found = [t for t in tokens if any(t.startswith(v) for v in variables)]
        if hook is None or not found:
            return
        confined = _in_container(row) or row.get("job_id") is not None
        preload = any(t.startswith("LD_PRELOAD=") for t in found)
        severity = None if confined or preload else Severity.HIGH
        self._fire("CE-2", row, hook, f"exec of {command}", severity)

    # ---------------------------------------------------------------- connects

    def _connect(self, row: Row) -> None:
        daddr, dport = str(row["sock_daddr"]), row.get("sock_dport")
        target = f"{daddr}:{dport}" if dport is not None else daddr
        who = f"{row.get('binary')} ({row.get('function_name') or row['event_type']})"
        outside = self._outside(daddr)
        proc = self.state.procs.get(row.get("exec_id") or "")
        binary = row.get("binary") or ""
        if self._temp(binary) and "SC-2" in self.rules:
            window = timedelta(seconds=self.rules["SC-2"].threshold("connect_window_seconds"))
            started = proc.ts if proc is not None else None
            after = event_time(row) - started if started is not None else None
            if after is not None and after <= window:
                summary = f"{binary} connected to {target} {after} after its exec"
                self._fire("SC-2", row, binary, summary, Severity.CRITICAL)
        name = basename(binary)
        if name in self._items("SC-8", "reverse_shell_tools"):
            args = f" {row.get('arguments') or ''} "
            handoff = any(flag in args for flag in _SHELL_HANDOFF) or (
                ("/dev/tcp/" in args or "/dev/udp/" in args)
                and any(r in args for r in _STDIO_REDIRECT)
            )
            severity = (
                Severity.CRITICAL if outside else Severity.HIGH if handoff else Severity.MEDIUM
            )
            self._fire("SC-8", row, name, f"{_command(row)} connected to {target}", severity)
        if "SC-3" in self.rules and daddr not in self._proxies:
            miner = dport is not None and str(dport) in self._items("SC-3", "miner_ports")
            dns = dport == 53 and bool(self._resolvers) and daddr not in self._resolvers
            if outside or miner or dns:
                top = Severity.CRITICAL if miner else None
                self._fire("SC-3", row, target, f"{who} connected to {target}", top)

    # ---------------------------------------------------------------- kprobes

    def _hook(self, row: Row) -> None:
        function = row.get("function_name") or ""
        hook = syscall_name(function)
        if row.get("sock_daddr") and not any(w in function for w in _NOT_CONNECT):
            self._connect(row)
        elif function in FILE_HOOKS or function in TRUNCATE_HOOKS or hook in _LSM_FILE:
            self._file(row, function)
        elif (hook in _WRITES or hook in _READS) and row.get("file_path"):
            self._file(row, function, write=hook in _WRITES)
        elif function in _UNLINK or hook in _UNLINK:
            self._unlink(row)
        elif function in self._items("CE-1", "module_functions") or function in (
            "do_init_module",
            "security_kernel_module_request",
        ):
            self._module(row, function)
        elif hook in _SETNS:
            self._setns(row, function)
        elif function in _CREDS or hook in _SETUID:
            self._creds(row, hook)
        elif function in _SOCKET or hook in _SOCKET:
            self._socket(row, function)

    def _setns(self, row: Row, function: str) -> None:
        name = basename(row.get("binary"))
        args = f" {row.get('arguments') or ''} "
        proc = self.state.procs.get(row.get("exec_id") or "")
        target_pid1 = name == "nsenter" and any(flag in args for flag in _PID1)
        confined = _in_container(row) or row.get("job_id") is not None
        starter = name in self._items("CE-3", "container_starters")
        if target_pid1 or (proc is not None and proc.escape) or (confined and not starter):
            self._fire("CE-3", row, name, f"{function} by {_command(row)}")

    def _creds(self, row: Row, hook: str) -> None:
        uid = row.get("uid")
        if uid is None or uid == 0:
            return
        if hook in _SETUID:
            ints = row.get("int_args") or []
            to_root = 0 in ints
        else:
            to_root = row.get("cred_uid") == 0 or row.get("cred_euid") == 0
        binary = row.get("binary") or ""
        if not to_root or binary in self._items("CE-6", "privilege_tools"):
            return
        severity = Severity.CRITICAL if self._temp(binary) or _in_container(row) else None
        summary = f"uid {uid} -> 0 by {_command(row)} ({row.get('function_name')})"
        self._fire("CE-6", row, binary, summary, severity)

    def _module(self, row: Row, function: str) -> None:
        binary = row.get("binary") or ""
        confined = _in_container(row) or row.get("job_id") is not None
        loader = basename(binary) in self._items("CE-1", "module_loaders")
        if function == "do_init_module":
            tainted = set(row.get("module_tainted") or ()) & set(self._items("CE-1", "taints"))
            module = row.get("module_name") or "?"
            if tainted:
                flags = ", ".join(sorted(tainted))
                summary = f"module {module} loaded by {_command(row)} ({flags})"
                self._fire("CE-1", row, "kernel module", summary, Severity.CRITICAL)
            elif confined:
                self._fire("CE-1", row, "kernel module", f"module {module} loaded by {binary}")
        elif function == "security_kernel_module_request":
            if confined:
                what = row.get("string_arg") or "?"
                summary = f"{_command(row)} made the kernel load {what}"
                self._fire("CE-1", row, "kernel module", summary, Severity.MEDIUM)
        elif function == "security_kernel_read_file":
            if READING_MODULE not in (row.get("int_args") or []):
                return
            path = row.get("file_path") or ""
            outside_tree = not under(path, self._items("CE-1", "module_dirs"))
            if outside_tree or confined:
                self._fire("CE-1", row, "kernel module", f"module {path} read by {binary}")
        elif not loader or confined:  # init_module, finit_module
            self._fire("CE-1", row, "kernel module", f"{function} by {_command(row)}")

    def _file(self, row: Row, function: str, *, write: bool | None = None) -> None:
        path = row.get("file_path") or ""
        if write is None:
            kind = file_access_kind(
                function, access_mask=row.get("access_mask"), int_args=row.get("int_args")
            )
            write = kind is not None and kind.write  # an LSM file hook: an open for reading
        name, temp = basename(row.get("binary")), self._temp(row.get("binary"))
        what = f"{'write' if write else 'read'} of {path} by {row.get('binary')} ({function})"
        if write and path.endswith("/release_agent"):
            self._fire("CE-1", row, path, what, Severity.CRITICAL)
        sensitive_write = (
            write
            and under(path, self._items("CE-4", "sensitive_write_prefixes"))
            and (name not in self._items("CE-4", "sensitive_writers") or temp)
        )
        secret_read = path in self._items("CE-4", "secret_paths") and (
            name not in self._items("CE-4", "secret_readers") or temp
        )
        job_write = (
            write
            and row.get("job_id") is not None
            and under(path, self._items("CE-4", "host_only_prefixes"))
        )
        if sensitive_write or secret_read or job_write:
            self._fire("CE-4", row, path, what)

    def _unlink(self, row: Row) -> None:
        path = row.get("file_path") or row.get("string_arg") or ""
        entry = row.get("entry_path")
        if entry and row.get("function_name") == "security_path_unlink":
            path = f"{path.rstrip('/')}/{basename(entry)}"
        roots = self.dataset_roots
        if any(path == root or path.startswith(root + "/") for root in roots):
            directory = path.rsplit("/", 1)[0]
            self._fire("DP-6", row, directory, f"{path} removed by {_command(row)}")

    def _socket(self, row: Row, function: str) -> None:
        ints = list(row.get("int_args") or ())
        family, kind = [*ints, None, None][:2]
        if family != AF_PACKET and kind != SOCK_RAW:
            return
        if basename(row.get("binary")) in self._items("RD-8", "raw_socket_tools"):
            return
        confined = _in_container(row) or row.get("job_id") is not None
        what = "packet" if family == AF_PACKET else "raw"
        severity = None if confined else Severity.MEDIUM
        summary = f"a {what} socket (family {family}, type {kind}) by {_command(row)}"
        self._fire("RD-8", row, basename(row.get("binary")), summary, severity)
