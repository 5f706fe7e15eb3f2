"""The sensor's records -> Tetragon JSON export events, so one parser reads both.

Each event is what a Tetragon agent would export for the same kernel fact under hpcscope's
TracingPolicies (``deploy/tetragon/``; the shapes in ``docs/security.md``, "Tetragon event
shapes the rules read"): a ``process_exec`` for every exec, a ``process_kprobe`` (``action``
``KPROBE_ACTION_POST``, ``policy_name`` the policy that would post it) for the rest:

- an open of a watched path (:class:`~hpcscope.service.security.sensor_watch.SensorWatch`):
  ``security_file_open``, args ``file_arg`` and ``int_arg`` (the open flags); the bytes read
  or written on it (each second, and at close): ``security_file_permission``, args
  ``file_arg``, ``int_arg`` 4 (MAY_READ) or 2 (MAY_WRITE), ``size_arg`` (bytes); an mmap:
  ``security_mmap_file``, args ``file_arg``, ``uint_arg`` prot, ``uint_arg`` flags,
  ``size_arg`` (length). Policy ``hpcscope-sensor`` under the protected roots,
  ``hpcscope-sensitive-files`` for the host's secrets and sensitive writes;
- an exec whose credentials changed (a setuid binary), or a setuid-family call that changed
  them: ``commit_creds``, a ``process_credentials_arg`` (the new ``uid``, ``euid``...), the
  process's ``uid`` the old one; the setuid-family call asking for uid 0 itself:
  ``__x64_sys_setuid`` (``setreuid``, ``setresuid``), ``int_arg`` uids (``hpcscope-credentials``);
- a TCP connect the network policy posts: ``tcp_connect``, a ``sock_arg`` (family, type,
  protocol, daddr, dport), chained to the image that made it by ``exec_id``; a packet or
  raw socket: ``security_socket_create``, ``int_arg`` family, type, protocol, kern
  (``hpcscope-network``);
- ``__x64_sys_setns`` (``int_arg`` fd, nstype: ``hpcscope-namespaces``); ``__x64_sys_ptrace``
  (``int_arg`` request, pid), ``__x64_sys_process_vm_readv`` (``int_arg`` pid)
  (``hpcscope-sensor``);
- module loads: ``__x64_sys_finit_module`` / ``__x64_sys_init_module``,
  ``security_kernel_read_file`` (``file_arg``, ``int_arg`` 2), and once loaded
  ``do_init_module`` (``module_arg`` name and taint flags) (``hpcscope-modules``);
- unlinks under the roots: ``__x64_sys_unlinkat`` (``int_arg`` dfd, ``string_arg`` path,
  ``int_arg`` flag) or ``__x64_sys_unlink`` (``hpcscope-weights``).

(``__arm64_sys_`` on arm64.) One extension: the ``process`` object carries ``slurm_job``
(``job_id``, ``job_sluid``, ``step``, ``source``: ``cgroup``, ``stepd``, or ``parent
cgroup``/``parent stepd`` for a process gone before it was read), the job the sensor resolved
while the process was alive; a real Tetragon never writes it, and the parser uses it only
when its own ``/proc/<pid>/cgroup`` lookup finds nothing. ``size_arg`` is a string, as
protojson writes 64-bit integers.

Bytes are exact for read/pread/readv/preadv/sendfile/copy_file_range and the write family;
mmap'ed bytes are the mapped length (pages touched are not seen by syscalls); GPUDirect
Storage and io_uring bypass them (``docs/security.md``, limits).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.model.security_events import MAY_READ, MAY_WRITE
from hpcscope.service.security.sensor_calls import CallEvents
from hpcscope.service.security.sensor_execs import ExecImages, merged_arguments
from hpcscope.service.security.sensor_procs import ProcessInfo, ProcReader
from hpcscope.service.security.sensor_shapes import (
    ExecJson,
    FileArg,
    KprobeArg,
    KprobeEvent,
    KprobeJson,
    ParentJson,
    ProcessJson,
    TetragonEvent,
)
from hpcscope.service.security.sensor_watch import SensorWatch

POLICY = "hpcscope-sensor"
SENSITIVE_POLICY = "hpcscope-sensitive-files"
#: bpftrace's string size (``BPFTRACE_STRLEN``): a path this long was cut in the kernel.
KERNEL_STRLEN = 64
ACTION = "KPROBE_ACTION_POST"
_KEPT_AFTER_EXIT_NS = 3_000_000_000  # an exited process's bytes arrive with the next flush
_CONTEXT_FREE = frozenset({"bytes", "close", "dup", "exit", "mmap", "argv", "module_done"})


@dataclass
class _OpenFile:
    path: str
    flags: int
    process: ProcessInfo
    policy: str
    read_bytes: int = 0
    written_bytes: int = 0


def _binary(path: str, info: ProcessInfo) -> str:
    """An exec's ``binary``: the file name execve was given, as Tetragon writes it (a script,
    not its interpreter; made absolute with the cwd), ``/proc``'s ``exe`` when the kernel cut
    the name or there was none (``fexecve``); ``/proc`` may already show a later image."""
    if len(path.encode()) >= KERNEL_STRLEN - 1 and info.alive and info.binary.startswith(path):
        return info.binary
    if path.startswith("/"):
        return path
    if path and info.cwd:
        return os.path.normpath(os.path.join(info.cwd, path))
    return info.binary or path


def rfc3339_ns(time_ns: int) -> str:
    """``2026-12-01T12:00:00.123456789Z``: Tetragon's ``time``."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


@dataclass
class SensorStats:
    """What a translator has seen: events written, records dropped, lost kernel events."""

    events: int = 0
    lost_events: int = 0
    attached_probes: int = 0
    skipped_connects: int = 0
    skipped_opens: int = 0
    by_function: dict[str, int] = field(default_factory=dict)


class SensorTranslator(CallEvents):
    """Sensor records in, Tetragon export events out (stateful: open files, exec images).

    Args:
        reader: process facts by pid.
        node: ``node_name`` of every event.
        monotonic_to_wall_ns: added to the kernel's CLOCK_MONOTONIC ns to get epoch ns.
        watch: what is posted (the policies' selectors); default: every open the program
            reports under the protected roots it was given, the policies' lists otherwise.
    """

    def __init__(
        self,
        reader: ProcReader,
        *,
        node: str,
        monotonic_to_wall_ns: int,
        watch: SensorWatch | None = None,
    ) -> None:
        self.reader = reader
        self.node = node
        self.offset_ns = monotonic_to_wall_ns
        self.watch = watch
        self.stats = SensorStats()
        self.images = ExecImages()
        self._files: dict[tuple[int, int], _OpenFile] = {}
        self._exited: dict[int, int] = {}
        self._last_ns = 0
        self._cut_paths: dict[tuple[int, int], str] = {}
        self._execs: dict[tuple[int, int | None], ProcessInfo] = {}
        self._observing = False
        super().__init__()

    def observe(self, record: SensorRecord) -> None:
        """Read what ``/proc`` says of a record's process the moment it arrives, before it
        waits in :class:`~hpcscope.service.security.sensor_order.KernelOrder`: a short-lived
        process (a ``dd``, a dropped binary) may be gone by the time it is translated, and
        :class:`ProcReader` keeps the last facts of a process it has seen."""
        pid = record.pid
        self._observing = True
        if record.kind == "argv" and record.tid is not None:
            self.images.add_chunk(record.tid, record.ns or 0, record.index or 0,
                                  record.data or "")  # fmt: skip
            return
        if pid is None or record.kind in _CONTEXT_FREE:
            return
        if record.ppid is not None:
            self.reader.process(record.ppid)
        if record.kind == "exec":
            self._observe_exec(record, pid)
            return
        self.reader.process(pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        path, fd = record.path, record.fd
        cut = path is not None and len(path.encode()) >= KERNEL_STRLEN - 1
        if record.kind == "open" and cut and path is not None and fd is not None and fd >= 0:
            linked = self.reader.path_of_fd(pid, fd)
            if linked is not None and linked.startswith(path):
                self._cut_paths[(pid, fd)] = linked
        self.observe_call(record, pid)

    def _observe_exec(self, record: SensorRecord, pid: int) -> ProcessInfo:
        """The new image: ``/proc`` read now (the binary, cwd, job), the kernel's argv and
        time (its ``exec_id``)."""
        before = self.reader.peek(pid)
        info = self.reader.process(pid, uid=record.uid, comm=record.path, ppid=record.ppid,
                                   fresh=True)  # fmt: skip
        argv, cut = self.images.argv(record.tid or pid, record.ns or 0, record.length or 0)
        image = dataclasses.replace(
            info,
            exec_id=self.reader.exec_id(pid, record.ns or info.start_ns),
            binary=_binary(record.path or "", info),
            arguments=merged_arguments(argv, cut, info.arguments if info.alive else None),
            uid=record.uid,
        )
        if before is not None and before.start_ns != info.start_ns:
            before = None
        if before is not None and info.ppid is not None:
            # what it did before this exec, it did as a fork of its parent (Tetragon's clone:
            # its own exec_id, the parent's binary and arguments; /proc may show this image)
            parent = self._parent(info, record.ns)
            if parent is not None:
                before = dataclasses.replace(
                    before, exec_id=self.reader.exec_id(pid, before.start_ns),
                    binary=parent.binary, arguments=parent.arguments,
                )  # fmt: skip
        self.images.add(pid, record.ns or 0, image, before)
        self.reader.remember(image)
        self._execs[(pid, record.ns)] = image
        return image

    # ---------------------------------------------------------------- building blocks

    def _wall(self, ns: int | None) -> int:
        if ns is not None:
            self._last_ns = ns
        return self._last_ns + self.offset_ns

    def info(self, record: SensorRecord, pid: int | None = None) -> ProcessInfo:
        """The process of a record as it was at the record's kernel time (its image then)."""
        pid = record.pid if pid is None else pid
        assert pid is not None
        current = self.reader.process(pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        return self.images.at(pid, record.ns, current) or current

    def _parent(self, info: ProcessInfo, ns: int | None) -> ProcessInfo | None:
        if info.ppid is None:
            return None
        current = self.reader.process(info.ppid)
        return self.images.at(info.ppid, ns, current) or current

    def _process_json(
        self, info: ProcessInfo, tid: int | None, ns: int | None, uid: int | None = None
    ) -> ProcessJson:
        process: ProcessJson = {
            "exec_id": info.exec_id,
            "pid": info.pid,
            "binary": info.binary,
            "arguments": info.arguments,
            "cwd": info.cwd,
            "flags": "procFS" if info.alive else "procFS nocwd",
            "tid": tid if tid is not None else info.pid,
        }
        uid = info.uid if uid is None else uid
        if uid is not None:
            process["uid"] = uid
        if info.start_ns:
            process["start_time"] = rfc3339_ns(info.start_ns + self.offset_ns)
        if info.auid is not None:
            process["auid"] = info.auid
        parent = self._parent(info, ns)
        if parent is not None:
            process["parent_exec_id"] = parent.exec_id
        if info.job is not None:
            process["slurm_job"] = {
                "job_id": info.job.job_id,
                "job_sluid": info.job.job_sluid,
                "step": info.job.step,
                "source": info.job.source,
            }
        return process

    def _parent_json(self, info: ProcessInfo, ns: int | None) -> ParentJson | None:
        parent = self._parent(info, ns)
        if parent is None:
            return None
        return {"exec_id": parent.exec_id, "pid": parent.pid, "binary": parent.binary,
                "arguments": parent.arguments, "uid": parent.uid}  # fmt: skip

    def kprobe(
        self,
        info: ProcessInfo,
        record: SensorRecord,
        function: str,
        args: list[KprobeArg],
        *,
        policy: str = POLICY,
        returned: int | None = None,
        uid: int | None = None,
    ) -> KprobeEvent:
        """One ``process_kprobe`` of ``info`` at the record's time; the process's ``uid`` is
        ``uid``, else the record's (the kernel's at the event), else the one read."""
        uid = record.uid if uid is None else uid
        event: KprobeJson = {
            "process": self._process_json(info, record.tid, record.ns, uid),
            "function_name": function,
            "args": args,
            "action": ACTION,
            "policy_name": policy,
        }
        if returned is not None:
            event["return"] = {"int_arg": returned}
        parent = self._parent_json(info, record.ns)
        if parent is not None:
            event["parent"] = parent
        self.stats.events += 1
        self.stats.by_function[function] = self.stats.by_function.get(function, 0) + 1
        return {
            "process_kprobe": event,
            "node_name": self.node,
            "time": rfc3339_ns(self._wall(record.ns)),
        }

    def file_arg(self, path: str) -> FileArg:
        mode = self.reader.file_mode(path)
        return {"file_arg": {"path": path, "permission": mode} if mode else {"path": path}}

    def _bytes_events(
        self, record: SensorRecord, opened: _OpenFile, read: int, written: int
    ) -> list[TetragonEvent]:
        events: list[TetragonEvent] = []
        for mask, count in ((MAY_READ, read), (MAY_WRITE, written)):
            if count > 0:
                args: list[KprobeArg] = [self.file_arg(opened.path), {"int_arg": mask},
                                         {"size_arg": str(count)}]  # fmt: skip
                events.append(self.kprobe(opened.process, record, "security_file_permission",
                                          args, policy=opened.policy))  # fmt: skip
        opened.read_bytes += read
        opened.written_bytes += written
        return events

    # ---------------------------------------------------------------- records

    def feed(self, record: SensorRecord) -> list[TetragonEvent]:
        """The Tetragon events one record gives (often none: a half of a pair, a flush)."""
        if self._exited and record.ns is not None:
            self._forget_exited(record.ns)
        handler: Callable[[SensorRecord], Sequence[TetragonEvent]] | None = getattr(
            self, f"_on_{record.kind}", None
        )
        return [] if handler is None else list(handler(record))

    def feed_all(self, records: Iterable[SensorRecord]) -> list[TetragonEvent]:
        return [event for record in records for event in self.feed(record)]

    def _on_attached(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        self.stats.attached_probes = record.count or 0
        return ()

    def _on_lost(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        self.stats.lost_events += record.count or 0
        return ()

    def _on_argv(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if not self._observing and record.tid is not None:  # fed without observe (tests)
            self.images.add_chunk(record.tid, record.ns or 0, record.index or 0,
                                  record.data or "")  # fmt: skip
        return ()

    def _on_open(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        path = record.path
        if path is None or record.pid is None or record.fd is None or record.fd < 0:
            return ()
        full = path
        if len(path.encode()) >= KERNEL_STRLEN - 1:
            # cut in the kernel: the whole path from /proc, read when the record arrived
            # (observe) or now, if the descriptor is still that file (the process may have
            # closed it and reused the number since)
            linked = self._cut_paths.pop((record.pid, record.fd), None)
            if linked is None:
                linked = self.reader.path_of_fd(record.pid, record.fd)
            if linked is not None and linked.startswith(path):
                full = linked
        policy = POLICY
        if self.watch is not None:
            kind = self.watch.open_policy(full, record.flags or 0)
            if kind is None:
                self.stats.skipped_opens += 1
                return ()
            policy = POLICY if kind == "weights" else SENSITIVE_POLICY
        info = self.info(record)
        self._files[(record.pid, record.fd)] = _OpenFile(full, record.flags or 0, info, policy)
        args: list[KprobeArg] = [self.file_arg(full), {"int_arg": record.flags or 0}]
        return [self.kprobe(info, record, "security_file_open", args, policy=policy)]

    def _on_dup(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is not None and record.pid is not None and record.target_fd is not None:
            self._files[(record.pid, record.target_fd)] = _OpenFile(
                opened.path, opened.flags, opened.process, opened.policy
            )
        return ()

    def _on_bytes(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is None:
            return ()
        return self._bytes_events(record, opened, record.read_bytes or 0, record.written_bytes or 0)

    def _on_close(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        opened = self._files.pop((record.pid or -1, record.fd if record.fd is not None else -1),
                                 None)  # fmt: skip
        if opened is None:
            return ()
        return self._bytes_events(record, opened, record.read_bytes or 0, record.written_bytes or 0)

    def _on_mmap(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is None:
            return ()
        args: list[KprobeArg] = [
            self.file_arg(opened.path),
            {"uint_arg": record.prot or 0},
            {"uint_arg": record.map_flags or 0},
            {"size_arg": str(record.length or 0)},
        ]
        return [self.kprobe(opened.process, record, "security_mmap_file", args,
                            policy=opened.policy)]  # fmt: skip

    def _on_exec(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        if record.path is None or record.pid is None:
            return ()
        # the image observe built when the record arrived (the process, or its ancestors,
        # may be gone by now), else built now
        image = self._execs.pop((record.pid, record.ns), None)
        if image is None:
            image = self._observe_exec(record, record.pid)
        process = self._process_json(image, record.tid, record.ns)
        process["flags"] = "execve" if image.alive else "execve nocwd"
        event: ExecJson = {"process": process}
        parent = self._parent_json(image, record.ns)
        if parent is not None:
            event["parent"] = parent
        self.stats.events += 1
        self.stats.by_function["exec"] = self.stats.by_function.get("exec", 0) + 1
        events: list[TetragonEvent] = [{"process_exec": event, "node_name": self.node,
                                        "time": rfc3339_ns(self._wall(record.ns))}]  # fmt: skip
        changed = (record.old_uid, record.old_euid) != (record.uid, record.euid)
        if changed and record.old_uid is not None:
            creds: KprobeArg = {
                "process_credentials_arg": {"uid": record.uid or 0, "euid": record.euid or 0}
            }
            events.append(
                self.kprobe(image, record, "commit_creds", [creds],
                            policy="hpcscope-credentials", uid=record.old_uid)
            )  # fmt: skip
        return events

    def _on_exit(self, record: SensorRecord) -> Sequence[TetragonEvent]:
        tracked = record.pid is not None and any(pid == record.pid for pid, _ in self._files)
        if tracked and record.pid is not None and record.ns is not None:
            self._exited[record.pid] = record.ns
        return ()

    def _forget_exited(self, now_ns: int) -> None:
        """Forget the open files of processes that exited more than 3 s ago (the program
        flushes bytes every second; a process that never closed its files is done)."""
        for pid, exited_ns in list(self._exited.items()):
            if now_ns - exited_ns > _KEPT_AFTER_EXIT_NS:
                del self._exited[pid]
                for key in [k for k in self._files if k[0] == pid]:
                    del self._files[key]
