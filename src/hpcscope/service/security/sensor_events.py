"""The sensor's records -> Tetragon JSON export events, so one parser reads both.

Each event is what a Tetragon host agent would export for the same kernel fact
(``security.md`` §8): a ``process_exec`` for an exec, a ``process_kprobe`` (``policy_name``
``hpcscope-sensor``, ``action`` ``KPROBE_ACTION_POST``) for the rest, with the hook name
hpcscope's rules and Tetragon's example policies use:

- open of a protected path: ``security_file_open``, args ``file_arg`` and ``int_arg`` (the
  open flags);
- bytes read or written on it (each second, and at close): ``security_file_permission``,
  args ``file_arg``, ``int_arg`` 4 (MAY_READ) or 2 (MAY_WRITE), ``size_arg`` (bytes);
- mmap of it: ``security_mmap_file``, args ``file_arg``, ``uint_arg`` prot, ``uint_arg``
  flags, ``size_arg`` (length);
- connect from a job process: ``__sys_connect``, a ``sock_arg`` (family, daddr, dport);
- ptrace: ``__x64_sys_ptrace`` (``int_arg`` request, pid); process_vm_readv:
  ``__x64_sys_process_vm_readv`` (``int_arg`` pid); setns: ``__x64_sys_setns`` (``int_arg``
  fd, nstype).

One extension: the ``process`` object carries ``slurm_job`` (``job_id``, ``job_sluid``,
``step``, ``source``: ``cgroup``, ``stepd``, or ``parent cgroup``/``parent stepd`` for a
process gone before it was read), the job the sensor resolved while the process
was alive; a real Tetragon never writes it, and the parser uses it only when its own
``/proc/<pid>/cgroup`` lookup finds nothing. ``size_arg`` is a string, as protojson writes
64-bit integers.

Bytes are exact for read/pread/readv/preadv/sendfile/copy_file_range and the write family;
mmap'ed bytes are the mapped length (pages touched are not seen by syscalls); GPUDirect
Storage and io_uring bypass them (``docs/security.md``, limits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.model.security_events import MAY_READ, MAY_WRITE
from hpcscope.service.security.sensor_procs import ProcessInfo, ProcReader

POLICY = "hpcscope-sensor"
#: bpftrace's string size (``BPFTRACE_STRLEN``): a path this long was cut in the kernel.
KERNEL_STRLEN = 64
ACTION = "KPROBE_ACTION_POST"
_FAMILIES = {2: "AF_INET", 10: "AF_INET6"}
_KEPT_AFTER_EXIT_NS = 3_000_000_000  # an exited process's bytes arrive with the next flush


@dataclass
class _OpenFile:
    path: str
    flags: int
    process: ProcessInfo
    read_bytes: int = 0
    written_bytes: int = 0


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
    by_function: dict[str, int] = field(default_factory=dict)


class SensorTranslator:
    """Sensor records in, Tetragon export events out (stateful: the open files).

    Args:
        reader: process facts by pid.
        node: ``node_name`` of every event.
        monotonic_to_wall_ns: added to the kernel's CLOCK_MONOTONIC ns to get epoch ns.
        connect_jobs_only: write connects of job processes only (the program sees every
            connect of the node; SC-3 and W-2 are about jobs).
    """

    def __init__(
        self,
        reader: ProcReader,
        *,
        node: str,
        monotonic_to_wall_ns: int,
        connect_jobs_only: bool = True,
    ) -> None:
        self.reader = reader
        self.node = node
        self.offset_ns = monotonic_to_wall_ns
        self.connect_jobs_only = connect_jobs_only
        self.stats = SensorStats()
        self._files: dict[tuple[int, int], _OpenFile] = {}
        self._exited: dict[int, int] = {}
        self._last_ns = 0
        self._cut_paths: dict[tuple[int, int], str] = {}
        self._observed_execs: set[tuple[int, int | None]] = set()

    def observe(self, record: SensorRecord) -> None:
        """Read what ``/proc`` says of a record's process the moment it arrives, before it
        waits in :class:`~hpcscope.service.security.sensor_order.KernelOrder`: a short-lived
        process (a ``dd``, a dropped binary) may be gone by the time it is translated, and
        :class:`ProcReader` keeps the last facts of a process it has seen."""
        pid = record.pid
        if pid is None or record.kind in ("bytes", "close", "dup", "exit", "mmap"):
            return
        if record.ppid is not None:
            self.reader.process(record.ppid)
        if record.kind == "exec":
            self.reader.process(pid, uid=record.uid, comm=record.path, ppid=record.ppid,
                                fresh=True)  # fmt: skip
            self._observed_execs.add((pid, record.ns))  # translated from what was read now
            return
        self.reader.process(pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        path, fd = record.path, record.fd
        cut = path is not None and len(path.encode()) >= KERNEL_STRLEN - 1
        if record.kind == "open" and cut and path is not None and fd is not None and fd >= 0:
            linked = self.reader.path_of_fd(pid, fd)
            if linked is not None and linked.startswith(path):
                self._cut_paths[(pid, fd)] = linked

    # ---------------------------------------------------------------- building blocks

    def _wall(self, ns: int | None) -> int:
        if ns is not None:
            self._last_ns = ns
        return self._last_ns + self.offset_ns

    def _process_json(self, info: ProcessInfo, tid: int | None) -> dict[str, Any]:
        process: dict[str, Any] = {
            "exec_id": info.exec_id,
            "pid": info.pid,
            "uid": info.uid,
            "cwd": info.cwd,
            "binary": info.binary,
            "arguments": info.arguments,
            "flags": "procFS" if info.alive else "procFS nocwd",
            "start_time": rfc3339_ns(info.start_ns + self.offset_ns) if info.start_ns else None,
            "auid": info.auid,
            "tid": tid if tid is not None else info.pid,
        }
        if info.ppid is not None:
            parent = self.reader.process(info.ppid)
            process["parent_exec_id"] = parent.exec_id
        if info.job is not None:
            process["slurm_job"] = {
                "job_id": info.job.job_id,
                "job_sluid": info.job.job_sluid,
                "step": info.job.step,
                "source": info.job.source,
            }
        return {k: v for k, v in process.items() if v is not None}

    def _parent_json(self, info: ProcessInfo) -> dict[str, Any] | None:
        if info.ppid is None:
            return None
        parent = self.reader.process(info.ppid)
        return {"exec_id": parent.exec_id, "pid": parent.pid, "binary": parent.binary,
                "arguments": parent.arguments, "uid": parent.uid}  # fmt: skip

    def _kprobe(
        self, info: ProcessInfo, record: SensorRecord, function: str, args: list[dict[str, Any]]
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "process": self._process_json(info, record.tid),
            "function_name": function,
            "args": args,
            "action": ACTION,
            "policy_name": POLICY,
        }
        parent = self._parent_json(info)
        if parent is not None:
            event["parent"] = parent
        self.stats.events += 1
        self.stats.by_function[function] = self.stats.by_function.get(function, 0) + 1
        return {
            "process_kprobe": event,
            "node_name": self.node,
            "time": rfc3339_ns(self._wall(record.ns)),
        }

    def _file_arg(self, path: str) -> dict[str, Any]:
        arg: dict[str, Any] = {"path": path}
        mode = self.reader.file_mode(path)
        if mode is not None:
            arg["permission"] = mode
        return {"file_arg": arg}

    def _bytes_events(
        self, record: SensorRecord, opened: _OpenFile, read: int, written: int
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for mask, count in ((MAY_READ, read), (MAY_WRITE, written)):
            if count > 0:
                args = [self._file_arg(opened.path), {"int_arg": mask}, {"size_arg": str(count)}]
                events.append(
                    self._kprobe(opened.process, record, "security_file_permission", args)
                )
        opened.read_bytes += read
        opened.written_bytes += written
        return events

    # ---------------------------------------------------------------- records

    def feed(self, record: SensorRecord) -> list[dict[str, Any]]:
        """The Tetragon events one record gives (often none: a half of a pair, a flush)."""
        if self._exited and record.ns is not None:
            self._forget_exited(record.ns)
        handler = getattr(self, f"_on_{record.kind}", None)
        return [] if handler is None else list(handler(record))

    def feed_all(self, records: Iterable[SensorRecord]) -> list[dict[str, Any]]:
        return [event for record in records for event in self.feed(record)]

    def _on_attached(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        self.stats.attached_probes = record.count or 0
        return ()

    def _on_lost(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        self.stats.lost_events += record.count or 0
        return ()

    def _on_open(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
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
        info = self.reader.process(record.pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        self._files[(record.pid, record.fd)] = _OpenFile(full, record.flags or 0, info)
        args = [self._file_arg(full), {"int_arg": record.flags or 0}]
        return [self._kprobe(info, record, "security_file_open", args)]

    def _on_dup(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is not None and record.pid is not None and record.target_fd is not None:
            self._files[(record.pid, record.target_fd)] = _OpenFile(
                opened.path, opened.flags, opened.process
            )
        return ()

    def _on_bytes(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is None:
            return ()
        return self._bytes_events(record, opened, record.read_bytes or 0, record.written_bytes or 0)

    def _on_close(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        opened = self._files.pop((record.pid or -1, record.fd if record.fd is not None else -1),
                                 None)  # fmt: skip
        if opened is None:
            return ()
        return self._bytes_events(record, opened, record.read_bytes or 0, record.written_bytes or 0)

    def _on_mmap(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        opened = self._files.get((record.pid or -1, record.fd if record.fd is not None else -1))
        if opened is None:
            return ()
        args = [
            self._file_arg(opened.path),
            {"uint_arg": record.prot or 0},
            {"uint_arg": record.map_flags or 0},
            {"size_arg": str(record.length or 0)},
        ]
        return [self._kprobe(opened.process, record, "security_mmap_file", args)]

    def _on_exec(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        path = record.path
        if path is None or record.pid is None:
            return ()
        # re-read after the exec replaced the image, unless observe did when it arrived (the
        # process, or its ancestors, may be gone by now)
        observed = (record.pid, record.ns) in self._observed_execs
        self._observed_execs.discard((record.pid, record.ns))
        info = self.reader.process(
            record.pid, uid=record.uid, comm=path, ppid=record.ppid, fresh=not observed
        )
        process = self._process_json(info, record.tid)
        if not info.alive or not process.get("binary"):
            process["binary"] = path
        event: dict[str, Any] = {"process": process}
        parent = self._parent_json(info)
        if parent is not None:
            event["parent"] = parent
        self.stats.events += 1
        self.stats.by_function["exec"] = self.stats.by_function.get("exec", 0) + 1
        return [{"process_exec": event, "node_name": self.node,
                 "time": rfc3339_ns(self._wall(record.ns))}]  # fmt: skip

    def _on_connect(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        if record.pid is None:
            return ()
        info = self.reader.process(record.pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        if self.connect_jobs_only and info.job is None:
            self.stats.skipped_connects += 1
            return ()
        sock = {
            "family": _FAMILIES.get(record.family or 0, str(record.family)),
            "daddr": record.address,
            "dport": record.port,
        }
        return [self._kprobe(info, record, "__sys_connect", [{"sock_arg": sock}])]

    def _on_ptrace(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        if record.pid is None:
            return ()
        info = self.reader.process(record.pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        args = [{"int_arg": record.request}, {"int_arg": record.target_pid}]
        return [self._kprobe(info, record, "__x64_sys_ptrace", args)]

    def _on_vm_read(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        if record.pid is None:
            return ()
        info = self.reader.process(record.pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        args = [{"int_arg": record.target_pid}]
        return [self._kprobe(info, record, "__x64_sys_process_vm_readv", args)]

    def _on_setns(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
        if record.pid is None:
            return ()
        info = self.reader.process(record.pid, uid=record.uid, comm=record.comm, ppid=record.ppid)
        args = [{"int_arg": record.fd}, {"int_arg": record.nstype}]
        return [self._kprobe(info, record, "__x64_sys_setns", args)]

    def _on_exit(self, record: SensorRecord) -> Sequence[dict[str, Any]]:
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
