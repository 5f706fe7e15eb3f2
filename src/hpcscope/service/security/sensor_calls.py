"""The sensor's syscall records -> Tetragon kprobe events (``sensor_events.py`` has the list):
connects, raw sockets, ptrace, setns, the setuid family and credential changes, module
loads, unlinks. A base of :class:`~hpcscope.service.security.sensor_events.SensorTranslator`,
which builds the events (:meth:`CallEvents.kprobe`) and knows the processes
(:meth:`CallEvents.info`)."""

from __future__ import annotations

import os
import platform
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.service.security.sensor_procs import ProcessInfo, ProcReader
from hpcscope.service.security.sensor_shapes import (
    FileArg,
    KprobeArg,
    KprobeEvent,
    SockValue,
    TetragonEvent,
)
from hpcscope.service.security.sensor_watch import SensorWatch

if TYPE_CHECKING:
    from hpcscope.service.security.sensor_events import SensorStats

SYSCALL_PREFIX = "__arm64_sys_" if platform.machine() in ("aarch64", "arm64") else "__x64_sys_"
READING_MODULE = 2  # enum kernel_read_file_id: security_kernel_read_file's second argument
_SOCK_TYPE_MASK = 0xF
_FAMILIES = {2: "AF_INET", 10: "AF_INET6", 17: "AF_PACKET"}
_PROTOCOLS = {6: "IPPROTO_TCP", 262: "IPPROTO_MPTCP"}
#: /sys/module/<name>/taint letters -> Tetragon's ``module_arg.tainted`` names.
TAINT_NAMES = {
    "P": "TAINT_PROPRIETARY_MODULE",
    "O": "TAINT_OUT_OF_TREE_MODULE",
    "E": "TAINT_UNSIGNED_MODULE",
    "F": "TAINT_FORCED_MODULE",
    "C": "TAINT_CRAP",
    "T": "TAINT_RANDSTRUCT",
    "X": "TAINT_AUX",
}
_MODULE_SUFFIXES = (".ko.xz", ".ko.zst", ".ko.gz", ".ko")


def module_name(path: str) -> str:
    """The module a ``.ko`` file names (``hello-world.ko.xz`` -> ``hello_world``)."""
    name = os.path.basename(path)
    for suffix in _MODULE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.replace("-", "_")


class CallEvents(ABC):
    """Handlers of the syscall records (``_on_<kind>``), state of module loads in flight."""

    reader: ProcReader
    watch: SensorWatch | None
    stats: SensorStats
    sys_module: Path = Path("/sys/module")

    def __init__(self) -> None:
        self._loading: dict[int, tuple[ProcessInfo, str, int | None]] = {}
        self._module_paths: dict[tuple[int, int], str] = {}

    @abstractmethod
    def info(self, record: SensorRecord, pid: int | None = None) -> ProcessInfo: ...

    @abstractmethod
    def kprobe(
        self,
        info: ProcessInfo,
        record: SensorRecord,
        function: str,
        args: list[KprobeArg],
        *,
        policy: str = ...,
        returned: int | None = None,
        uid: int | None = None,
    ) -> KprobeEvent: ...

    @abstractmethod
    def file_arg(self, path: str) -> FileArg: ...

    def observe_call(self, record: SensorRecord, pid: int) -> None:
        """What must be read while the process lives: the module file a finit_module names."""
        if record.kind == "module" and record.fd is not None and record.fd >= 0:
            linked = self.reader.path_of_fd(pid, record.fd)
            if linked is not None and record.tid is not None:
                self._module_paths[(record.tid, record.ns or 0)] = linked

    def _on_connect(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        info = self.info(record)
        address = record.address or ""
        binary = info.binary or record.comm or ""
        if self.watch is not None and not self.watch.posts_connect(
            address, binary, in_job=info.job is not None
        ):
            self.stats.skipped_connects += 1
            return ()
        sock: SockValue = {
            "family": _FAMILIES.get(record.family or 0, str(record.family)),
            "type": "SOCK_STREAM",
            "protocol": _PROTOCOLS.get(record.protocol or 0, str(record.protocol)),
            "daddr": record.address,
            "dport": record.port,
        }
        return [self.kprobe(info, record, "tcp_connect", [{"sock_arg": sock}],
                            policy="hpcscope-network")]  # fmt: skip

    def _on_socket(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        # the hook sees the type without SOCK_NONBLOCK / SOCK_CLOEXEC (socket(2) strips them)
        kind = None if record.sock_type is None else record.sock_type & _SOCK_TYPE_MASK
        args: list[KprobeArg] = [{"int_arg": record.family}, {"int_arg": kind},
                                 {"int_arg": record.protocol}, {"int_arg": 0}]  # fmt: skip
        return [self.kprobe(self.info(record), record, "security_socket_create", args,
                            policy="hpcscope-network")]  # fmt: skip

    def _on_ptrace(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        args: list[KprobeArg] = [{"int_arg": record.request}, {"int_arg": record.target_pid}]
        return [self.kprobe(self.info(record), record, f"{SYSCALL_PREFIX}ptrace", args)]

    def _on_vm_read(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        args: list[KprobeArg] = [{"int_arg": record.target_pid}]
        return [self.kprobe(self.info(record), record, f"{SYSCALL_PREFIX}process_vm_readv",
                            args)]  # fmt: skip

    def _on_setns(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        args: list[KprobeArg] = [{"int_arg": record.fd}, {"int_arg": record.nstype}]
        return [self.kprobe(self.info(record), record, f"{SYSCALL_PREFIX}setns", args,
                            policy="hpcscope-namespaces")]  # fmt: skip

    def _on_setuid(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None or record.call is None:
            return ()
        given = {"setuid": (record.ruid,), "setreuid": (record.ruid, record.euid)}.get(
            record.call, (record.ruid, record.euid, record.suid)
        )
        args: list[KprobeArg] = [{"int_arg": uid} for uid in given]
        return [self.kprobe(self.info(record), record, f"{SYSCALL_PREFIX}{record.call}", args,
                            policy="hpcscope-credentials")]  # fmt: skip

    def _on_creds(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None:
            return ()
        info = self.info(record)
        args: list[KprobeArg] = [{"process_credentials_arg": {
            "uid": record.new_uid or 0, "euid": record.euid or 0, "gid": record.gid or 0,
            "egid": record.egid or 0}}]  # fmt: skip
        return [self.kprobe(info, record, "commit_creds", args, policy="hpcscope-credentials",
                            uid=record.old_uid)]  # fmt: skip

    def _on_module(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None or record.call is None:
            return ()
        info = self.info(record)
        function = f"{SYSCALL_PREFIX}{record.call}"
        if record.call != "finit_module":
            return [self.kprobe(info, record, function, [], policy="hpcscope-modules")]
        path = self._module_paths.pop((record.tid or 0, record.ns or 0), None) or record.path or ""
        if record.tid is not None:
            self._loading[record.tid] = (info, path, record.uid)
        args: list[KprobeArg] = [{"int_arg": record.fd}, {"int_arg": record.flags}]
        read: list[KprobeArg] = [self.file_arg(path), {"int_arg": READING_MODULE}]
        return [self.kprobe(info, record, function, args, policy="hpcscope-modules"),
                self.kprobe(info, record, "security_kernel_read_file", read,
                            policy="hpcscope-modules")]  # fmt: skip

    def _on_module_done(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        loading = self._loading.pop(record.tid or -1, None)
        if loading is None or record.ret != 0 or not loading[1]:
            return ()
        info, path, uid = loading
        name = module_name(path)
        try:
            letters = (self.sys_module / name / "taint").read_text().strip()
        except OSError:
            letters = ""
        tainted = [TAINT_NAMES.get(letter, f"TAINT_{letter}") for letter in letters]
        args: list[KprobeArg] = [{"module_arg": {"name": name, "tainted": tainted}}]
        return [self.kprobe(info, record, "do_init_module", args, policy="hpcscope-modules",
                            uid=uid)]  # fmt: skip

    def _on_unlink(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.pid is None or record.path is None or record.call is None:
            return ()
        args: list[KprobeArg] = [{"string_arg": record.path}]
        if record.call == "unlinkat":
            args = [{"int_arg": record.fd}, *args, {"int_arg": record.flags}]
        return [self.kprobe(self.info(record), record, f"{SYSCALL_PREFIX}{record.call}", args,
                            policy="hpcscope-weights")]  # fmt: skip
