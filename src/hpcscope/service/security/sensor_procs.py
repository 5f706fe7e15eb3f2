"""Processes as the sensor names them: ``/proc/<pid>`` read once per process, and its Slurm job.

The bpftrace program names a process by pid, uid and ``comm``; the Tetragon event the sensor
writes needs its ``exec_id``, binary, arguments, working directory, start time, parent and
Slurm job. :class:`ProcReader` reads them from ``<proc_root>/<pid>`` once per (pid, start
time), so a reused pid is a new process. The job (``security.md`` §0):

1. the Slurm cgroup of ``/proc/<pid>/cgroup`` (``proctrack/cgroup``, ``task/cgroup``);
2. else the nearest ``slurmstepd: [<job>.<step>]`` ancestor (``proctrack/linuxproc`` sites and
   test clusters without cgroups): the process tree is the kernel's, and a job's processes
   descend from its step daemon unless they daemonize away (then: no job, which RD-4 and the
   access records show as such).

Never a job's own environment (``SLURM_JOB_ID`` is self-reported). The proc root is a
parameter (tests point it at a committed tree).
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from hpcscope.ingest.security.cgroups import slurm_job_from_proc_cgroup

_STEPD = re.compile(r"slurmstepd: \[(\d+)(?:_\d+)?\.([A-Za-z0-9_]+)\]")
_MAX_DEPTH = 32
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcessJob:
    """The Slurm job of a process and how it was found (``cgroup`` or ``stepd``)."""

    job_id: str | None
    job_sluid: str | None
    step: str | None
    source: str


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process, as Tetragon's ``process`` object describes it.

    Attributes:
        exec_id: Tetragon-style id: base64 of ``node:start ns since boot:pid`` (unique over
            time, so immune to pid reuse).
        start_ns: start time in ns since boot (``/proc/<pid>/stat`` field 22).
        binary: ``/proc/<pid>/exe``, or the event's ``comm`` when the process is gone.
        arguments: the command line after argv[0], space-joined.
        auid: the login uid (``/proc/<pid>/loginuid``; 4294967295 when unset).
        alive: False when ``/proc/<pid>`` was already gone (fields from the event only).
    """

    pid: int
    exec_id: str
    start_ns: int
    ppid: int | None
    uid: int | None
    auid: int | None
    binary: str
    arguments: str
    cwd: str
    job: ProcessJob | None
    alive: bool


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _stat(text: str | None) -> tuple[str, int, int] | None:
    """(comm, ppid, start ticks) from ``/proc/<pid>/stat`` (comm may hold spaces and ')')."""
    if not text or ")" not in text:
        return None
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return head.partition("(")[2], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


class ProcReader:
    """Process facts by pid, cached per (pid, start time); bounded."""

    def __init__(
        self, *, node: str, proc_root: str | Path = "/proc", max_entries: int = 16_384
    ) -> None:
        self.node = node
        self.proc_root = Path(proc_root)
        self._max_entries = max_entries
        self._cache: OrderedDict[tuple[int, int], ProcessInfo] = OrderedDict()
        self._gone: OrderedDict[int, ProcessInfo] = OrderedDict()

    def exec_id(self, pid: int, start_ns: int) -> str:
        return base64.b64encode(f"{self.node}:{start_ns}:{pid}".encode()).decode()

    def start_ns(self, pid: int) -> int | None:
        found = _stat(_read(self.proc_root / str(pid) / "stat"))
        return None if found is None else found[2] * 1_000_000_000 // CLOCK_TICKS

    def process(
        self,
        pid: int,
        *,
        uid: int | None = None,
        comm: str | None = None,
        ppid: int | None = None,
        fresh: bool = False,
    ) -> ProcessInfo:
        """The process ``pid`` now (``fresh``: re-read, after an exec replaced its image).

        A process already gone (a ``dd`` that read a checkpoint and exited before its event
        was read) is described by the event: its last known facts when it was seen before,
        else ``comm`` as binary and the job of its parent ``ppid`` (the event's), which Slurm's
        confinement makes the same job (source ``parent <how>``).
        """
        base = self.proc_root / str(pid)
        stat = _stat(_read(base / "stat"))
        if stat is None:
            known = self._gone.get(pid)
            if known is not None:
                return known
            job = self.job(ppid) if ppid is not None else None
            if job is None and ppid is not None and ppid in self._gone:
                job = self._gone[ppid].job  # the parent is gone too: its last known job
            if job is not None:
                job = ProcessJob(job.job_id, job.job_sluid, job.step, f"parent {job.source}")
            gone = ProcessInfo(pid, self.exec_id(pid, 0), 0, ppid, uid, None, comm or "",
                               "", "", job, alive=False)  # fmt: skip
            self._gone[pid] = gone  # what an exec of it later knows of it before
            while len(self._gone) > self._max_entries:
                self._gone.popitem(last=False)
            return gone
        event_ppid = ppid
        _, ppid, ticks = stat
        key = (pid, ticks)
        cached = self._cache.get(key)
        if cached is not None and not fresh:
            self._cache.move_to_end(key)
            return cached
        info = self._build(pid, base, ppid, ticks, uid=uid, comm=comm)
        if info.job is None and _stat(_read(base / "stat")) is None:
            # it exited while it was read (its stat, then nothing): the walk from it was cut,
            # and a child is in its parent's job (Slurm's confinement), so the parent's, by
            # the pid read above or the event's
            for parent in dict.fromkeys(p for p in (ppid, event_ppid) if p is not None and p > 1):
                job = self.job(parent)
                if job is not None:
                    inherited = ProcessJob(
                        job.job_id, job.job_sluid, job.step, f"parent {job.source}"
                    )
                    info = dataclasses.replace(info, job=inherited)
                    break
        self._cache[key] = info
        self._gone[pid] = info
        for table in (self._cache, self._gone):
            while len(table) > self._max_entries:
                table.popitem(last=False)
        return info

    def peek(self, pid: int) -> ProcessInfo | None:
        """The last facts known of ``pid`` without reading ``/proc`` (None: never seen)."""
        return self._gone.get(pid)

    def remember(self, info: ProcessInfo) -> None:
        """Take ``info`` as what ``pid`` is now (an exec's identity, from the sensor's own
        record), until the next fresh read."""
        key = (info.pid, info.start_ns * CLOCK_TICKS // 1_000_000_000)
        if info.alive:
            self._cache[key] = info
            self._cache.move_to_end(key)
        self._gone[info.pid] = info

    def _build(
        self, pid: int, base: Path, ppid: int, ticks: int, *, uid: int | None, comm: str | None
    ) -> ProcessInfo:
        try:
            binary = os.readlink(base / "exe")
        except OSError:
            binary = comm or ""
        argv = (_read(base / "cmdline") or "").split("\0")
        arguments = " ".join(a for a in argv[1:] if a)
        try:
            cwd = os.readlink(base / "cwd")
        except OSError:
            cwd = ""
        auid_text = (_read(base / "loginuid") or "").strip()
        start_ns = ticks * 1_000_000_000 // CLOCK_TICKS
        return ProcessInfo(
            pid=pid,
            exec_id=self.exec_id(pid, start_ns),
            start_ns=start_ns,
            ppid=ppid,
            uid=uid if uid is not None else self._uid(base),
            auid=int(auid_text) if auid_text.isdigit() else None,
            binary=binary,
            arguments=arguments,
            cwd=cwd,
            job=self.job(pid),
            alive=True,
        )

    @staticmethod
    def _uid(base: Path) -> int | None:
        for line in (_read(base / "status") or "").splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
        return None

    def job(self, pid: int) -> ProcessJob | None:
        """The Slurm job of ``pid``: its Slurm cgroup, else its ``slurmstepd`` ancestor."""
        found = slurm_job_from_proc_cgroup(_read(self.proc_root / str(pid) / "cgroup") or "")
        if found is not None:
            return ProcessJob(found.job_id, found.job_sluid, found.step, "cgroup")
        current: int | None = pid
        for _ in range(_MAX_DEPTH):
            if current is None or current <= 1:
                return None
            base = self.proc_root / str(current)
            cmdline = (_read(base / "cmdline") or "").replace("\0", " ").strip()
            match = _STEPD.match(cmdline)
            if match is not None:
                return ProcessJob(str(int(match.group(1))), None, match.group(2), "stepd")
            stat = _stat(_read(base / "stat"))
            current = None if stat is None else stat[1]
        return None

    def path_of_fd(self, pid: int, fd: int) -> str | None:
        """The full path of an open descriptor (the program's paths are cut at its string
        size), None when the process or the descriptor is gone."""
        try:
            return os.readlink(self.proc_root / str(pid) / "fd" / str(fd))
        except OSError:
            return None

    def file_mode(self, path: str) -> str | None:
        """``-rw-r--r--`` of a file, Tetragon's ``permission`` string; None when unreadable."""
        import stat as stat_module

        try:
            return stat_module.filemode(os.stat(path).st_mode)
        except OSError:
            return None
