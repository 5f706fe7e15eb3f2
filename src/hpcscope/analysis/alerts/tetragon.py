"""Tetragon events -> hpcscope alerts: the job rules evaluated on process and kprobe rows.

Tetragon posts what its TracingPolicies hook (``deploy/tetragon/``); hpcscope decides. The
rules about a job's processes live here; the node rules (SC-2, SC-3, SC-8, CE-1, CE-2, CE-3,
CE-4, CE-6, DP-6, RD-8), which fire whether or not a job owns the process, are
:mod:`hpcscope.analysis.alerts.node_rules`. Per event type:

- SC-6 on every event type: a process that read weights from a world-writable path spawns a
  child (``process_exec`` whose parent is it) or connects out within ``follow_seconds``;
- ``process_exec``: SC-1 (a shell or network tool with a Python ancestor in a job; the JIT
  toolchain allowed);
- ``process_kprobe`` on a file hook (``security_file_permission``, ``security_mmap_file``,
  ``fd_install``, the truncate hooks): W-1/W-3 under the checkpoint roots, SC-5 (a
  ``site-packages`` ``*.dist-info`` or ``.pth`` written by a job: ``packages.py``), RD-4
  (``/dev/infiniband/uverbs*`` opened outside every job);
- ``process_kprobe`` on ``ptrace`` and ``process_vm_readv`` (GM-3).

SC-1, SC-5 and W- need the event's job; RD-4 is the opposite (outside every job); GM-3
fires for root or outside every job.

W-1/W-3 limit: the creator of a checkpoint (a directory of shards) is the job of the **first
write seen** under it since the engine started (Lustre changelog CREAT records would name it
for older checkpoints); a checkpoint first seen read has no creator and raises no W-1.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hpcscope.analysis.alerts.common import (
    JobOwner,
    basename,
    event_alert,
    event_time,
    under,
)
from hpcscope.analysis.alerts.packages import installed_file, lock_set, why_high
from hpcscope.model.alerts import Alert, RuleSpec, Severity
from hpcscope.model.file_access import FILE_HOOKS, TRUNCATE_HOOKS, file_access_kind
from hpcscope.model.security_events import TetragonRow

MAX_EXECS = 65_536


@dataclass(frozen=True, slots=True)
class Creator:
    """Who created a checkpoint (the job of the first write seen under it)."""

    job_id: str
    account: str | None
    ts: datetime


@dataclass
class TetragonState:
    """What the rules remember between batches (bounded).

    Attributes:
        lineage: exec_id -> (binary name, parent exec_id), the newest :data:`MAX_EXECS`.
        creators: checkpoint directory -> its creator.
        weight_opens: exec_id -> (time, path) of SC-6 loads (weights from a world-writable
            path), the newest :data:`MAX_EXECS`.
    """

    lineage: OrderedDict[str, tuple[str, str | None]] = field(default_factory=OrderedDict)
    creators: dict[str, Creator] = field(default_factory=dict)
    weight_opens: OrderedDict[str, tuple[datetime, str]] = field(default_factory=OrderedDict)

    def remember(self, exec_id: str, binary: str, parent: str | None) -> None:
        self.lineage[exec_id] = (binary, parent)
        self.lineage.move_to_end(exec_id)
        while len(self.lineage) > MAX_EXECS:
            self.lineage.popitem(last=False)

    def ancestors(self, row: TetragonRow, depth: int = 8) -> list[str]:
        """Binary names of the process's parent, grandparent... as far as known."""
        names = [basename(row.get("parent_binary"))] if row.get("parent_binary") else []
        current: str | None = row.get("parent_exec_id")
        # the parent is already named by the event: start above it
        if names and current is not None and current in self.lineage:
            current = self.lineage[current][1]
        while current is not None and current in self.lineage and len(names) < depth:
            name, current = self.lineage[current]
            names.append(name)
        return names


class TetragonRules:
    """The Tetragon rules of one engine, with their state."""

    def __init__(
        self,
        rules: Mapping[str, RuleSpec],
        *,
        checkpoint_roots: tuple[str, ...],
        dataset_roots: tuple[str, ...] = (),
    ):
        self.rules = {k: v for k, v in rules.items() if v.enabled}
        self._lists: dict[tuple[str, str], tuple[str, ...]] = {}
        self.checkpoint_roots = tuple(r.rstrip("/") + "/" for r in checkpoint_roots if r)
        self.state = TetragonState()
        self._lockfile = lock_set(self._items("SC-5", "lockfile"))
        self._known_bad = lock_set(self._items("SC-5", "known_bad"))
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
            elif kind == "process_kprobe":
                self._kprobe(row)
        return self._found

    # ---------------------------------------------------------------- helpers

    def _fire(
        self,
        rule_id: str,
        row: TetragonRow,
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

    def _items(self, rule_id: str, name: str) -> tuple[str, ...]:
        """A rule's list (read once: the rules do not change while the engine runs)."""
        found = self._lists.get((rule_id, name))
        if found is None:
            spec = self.rules.get(rule_id)
            found = self._lists[(rule_id, name)] = spec.items(name) if spec is not None else ()
        return found

    # ---------------------------------------------------------------- process_exec

    def _exec(self, row: TetragonRow) -> None:
        binary, args = row.get("binary") or "", row.get("arguments") or ""
        name, in_job = basename(binary), row.get("job_id") is not None
        exec_id = row["exec_id"]
        if exec_id:
            self.state.remember(exec_id, name, row.get("parent_exec_id"))
        self._after_weights(row, row.get("parent_exec_id"), f"spawned {binary} {args}".strip())
        if not in_job:
            return
        command = f"{binary} {args}".strip()
        shells, tools = self._items("SC-1", "shells"), self._items("SC-1", "network_tools")
        if name in shells or name in tools:
            ancestors = self.state.ancestors(row)
            jit = self._items("SC-1", "jit_toolchain")
            jit_shell = name in shells and (
                (ancestors and ancestors[0] in jit)
                or any(args.startswith(f"-c {tool}") for tool in jit)
            )
            python = set(self._items("SC-1", "python_names"))
            if not jit_shell and python.intersection(ancestors):
                self._fire("SC-1", row, name, f"{command} under {' < '.join(ancestors)}")

    # ---------------------------------------------------------------- process_kprobe

    def _kprobe(self, row: TetragonRow) -> None:
        function = row.get("function_name") or ""
        if row.get("sock_daddr"):
            target = f"{row['sock_daddr']}:{row.get('sock_dport')}"
            self._after_weights(row, row.get("exec_id"), f"connected to {target}")
        elif function in FILE_HOOKS or function in TRUNCATE_HOOKS:
            self._file(row, function)
        elif function in self._items("GM-3", "trace_functions"):
            self._trace(row, function)

    def _file(self, row: TetragonRow, function: str) -> None:
        path = row.get("file_path") or ""
        kind = file_access_kind(
            function, access_mask=row.get("access_mask"), int_args=row.get("int_args")
        )
        read, write = (kind.read, kind.write) if kind is not None else (False, False)
        job = row.get("job_id")
        if read and not write:
            self._weights_opened(row, path)
        access = "write" if write else "read"
        what = f"{access} of {path} by {row.get('binary')} ({function})"
        if job is None:
            if under(path, self._items("RD-4", "device_prefixes")) and basename(
                row.get("binary")
            ) not in self._items("RD-4", "daemons"):
                self._fire("RD-4", row, basename(row.get("binary")), f"open of {what}")
            return
        if under(path, self.checkpoint_roots):
            self._checkpoint(row, path, write=write, what=what)
        if write and "SC-5" in self.rules:
            self._installed(row, path, what)

    def _installed(self, row: TetragonRow, path: str, what: str) -> None:
        """SC-5: a job process writes a distribution's metadata or a ``.pth`` (MEDIUM; HIGH
        when not locked or known bad)."""
        found = installed_file(path)
        if found is None:
            return
        high = why_high(found, self._lockfile, self._known_bad)
        verdict = high or "in the lockfile"
        summary = f"{what}: {found.kind} {found.subject} installed during the job ({verdict})"
        self._fire("SC-5", row, found.subject, summary, Severity.HIGH if high else None)

    def _weights_opened(self, row: TetragonRow, path: str) -> None:
        """SC-6's first half: weights read from a world-writable path (a temp directory, or a
        file whose mode lets anyone write it)."""
        exec_id = row.get("exec_id")
        if "SC-6" not in self.rules or not exec_id:
            return
        if not any(path.endswith(suffix) for suffix in self._items("SC-6", "weight_suffixes")):
            return
        mode = row.get("file_mode") or ""
        world_writable = len(mode) >= 9 and mode[8] == "w"
        if world_writable or under(path, self._items("SC-6", "world_writable_prefixes")):
            opens = self.state.weight_opens
            opens[exec_id] = (event_time(row), path)
            opens.move_to_end(exec_id)
            while len(opens) > MAX_EXECS:
                opens.popitem(last=False)

    def _after_weights(self, row: TetragonRow, exec_id: str | None, what: str) -> None:
        """SC-6's second half: the loading process spawns a child or connects out soon."""
        if exec_id is None or exec_id not in self.state.weight_opens:
            return
        opened, path = self.state.weight_opens[exec_id]
        follow = timedelta(seconds=self.rules["SC-6"].threshold("follow_seconds"))
        delay = event_time(row) - opened
        if timedelta(0) <= delay <= follow:
            self._fire("SC-6", row, path, f"loaded {path}, then {what} {delay} later")
            del self.state.weight_opens[exec_id]

    def _checkpoint(self, row: TetragonRow, path: str, *, write: bool, what: str) -> None:
        directory = path.rsplit("/", 1)[0]
        job = str(row["job_id"])
        owner = self._owners.get(job)
        account = owner.account if owner is not None else None
        creator = self.state.creators.get(directory)
        if creator is None:
            if write:
                self.state.creators[directory] = Creator(job, account, event_time(row))
            return
        if write and job != creator.job_id:
            self._fire("W-3", row, directory, f"{what}; created by job {creator.job_id}")
        elif (
            not write
            and account is not None
            and creator.account is not None
            and account != creator.account
            and account not in self._items("W-1", "service_accounts")
        ):
            summary = f"{what}; account {account}, created by account {creator.account}"
            self._fire("W-1", row, directory, summary)

    def _trace(self, row: TetragonRow, function: str) -> None:
        name, uid = basename(row.get("binary")), row.get("uid")
        owner_tool = (
            row.get("job_id") is not None
            and uid is not None
            and uid != 0
            and name in self._items("GM-3", "owner_tools")
        )
        if not owner_tool and (uid == 0 or row.get("job_id") is None):
            ints = row.get("int_args") or []
            self._fire("GM-3", row, name, f"{function}{tuple(ints)} by {row.get('binary')}")
