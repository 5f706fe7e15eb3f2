"""Slurm job by Tetragon ``exec_id``: host-mode events carry no cgroup, so read it once.

On bare metal Tetragon's events name the process (``exec_id``, ``pid``, ``uid``, ``binary``)
but not its pod or cgroup (``security.md`` §0). :class:`ExecJobCache` reads
``<proc_root>/<pid>/cgroup`` **once** per ``exec_id`` (unique over time, so immune to PID
reuse), when the ``process_exec`` arrives. When the process is already gone (short-lived
commands) it inherits the parent's job, which Slurm's cgroup confinement makes the same job.
``process_exit`` evicts the entry; the cache holds at most ``max_entries`` (least recently
used first out), so a lost exit cannot grow it without bound.

The proc root is a parameter (as prometheus_client's ``ProcessCollector(proc=...)``): tests
point it at a committed fake tree.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from hpcscope.ingest.security.cgroups import slurm_job_from_proc_cgroup
from hpcscope.model.security_events import SlurmCgroup


@dataclass(frozen=True, slots=True)
class ExecJob:
    """What the cache knows about one ``exec_id``: its job (or None) and how it was found."""

    job: SlurmCgroup | None
    how: str | None  # "cgroup", "parent" or None (not in a job / unknown)


_UNKNOWN = ExecJob(None, None)


class ExecJobCache:
    """Job of each live ``exec_id``, resolved through ``/proc/<pid>/cgroup`` once."""

    def __init__(self, *, proc_root: str | Path = "/proc", max_entries: int = 65_536) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._proc_root = Path(proc_root)
        self._max_entries = max_entries
        self._entries: OrderedDict[str, ExecJob] = OrderedDict()
        self.proc_reads = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, exec_id: object) -> bool:
        return exec_id in self._entries

    def on_exec(self, exec_id: str, pid: int | None, parent_exec_id: str | None) -> ExecJob:
        """Resolve (once) the job of a new process; later calls return the cached answer."""
        cached = self._entries.get(exec_id)
        if cached is not None:
            self._entries.move_to_end(exec_id)
            return cached
        found = self._read(pid)
        if found is not None:
            entry = ExecJob(found, "cgroup")
        elif self._gone(pid) and parent_exec_id is not None:
            parent = self._entries.get(parent_exec_id)
            entry = ExecJob(parent.job, "parent") if parent and parent.job else _UNKNOWN
        else:
            entry = _UNKNOWN
        self._put(exec_id, entry)
        return entry

    def lookup(self, exec_id: str | None, pid: int | None, parent_exec_id: str | None) -> ExecJob:
        """The job of a process seen in a kprobe/tracepoint/exit event.

        A process that started before Tetragon (no ``process_exec`` seen) is resolved the same
        way, once.
        """
        if exec_id is None:
            return _UNKNOWN
        return self.on_exec(exec_id, pid, parent_exec_id)

    def on_exit(self, exec_id: str | None) -> None:
        """Forget a process that exited."""
        if exec_id is not None:
            self._entries.pop(exec_id, None)

    def _put(self, exec_id: str, entry: ExecJob) -> None:
        self._entries[exec_id] = entry
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def _cgroup_file(self, pid: int) -> Path:
        return self._proc_root / str(pid) / "cgroup"

    def _read(self, pid: int | None) -> SlurmCgroup | None:
        if pid is None or pid <= 0:
            return None
        self.proc_reads += 1
        try:
            text = self._cgroup_file(pid).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return slurm_job_from_proc_cgroup(text)

    def _gone(self, pid: int | None) -> bool:
        return pid is None or pid <= 0 or not self._cgroup_file(pid).exists()
