"""What NCCL's warnings and PyTorch's watchdog messages mean, and what to do first (pure).

Records of the same kind and cause are folded into one :class:`Finding` with a count, the
first place it was seen and the processes or ranks involved. Meanings come from NCCL's and
rdma-core's public headers (:mod:`hpcscope.model.nccl`); actions are the first checks an
operator makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hpcscope.model.collectives import WatchdogEvent, WatchdogKind
from hpcscope.model.nccl import (
    IBV_EVENTS,
    IBV_WC_STATUS,
    NCCL_RESULTS,
    IbAsyncRecord,
    IbCompletionRecord,
    LineRef,
    NcclRecord,
    NetRecord,
    ReturnTraceRecord,
    WarnRecord,
    ibv_status_name,
    nccl_result_name,
)

_IB_ACTION = (
    "check the link between this host and the peer: port state and error counters on both "
    "ends (ibstat, perfquery: SymbolErrors, LinkDowned, PortRcvErrors), the switch port, and "
    "whether the peer process is still alive; on RoCE also the GID index and PFC settings"
)
_ACTIONS_BY_RESULT = {
    1: "look for an Xid on the GPU and for CUDA errors before this line",
    2: "look at the system error just before (socket, IB verbs, memory); check the NIC",
    3: "usually a peer failed first: find the earliest error on every rank",
    4: "fix the arguments the application passes to NCCL",
    5: "check that every rank calls the same collectives in the same order",
    6: "a remote peer or the network failed: look at the peer's log and the IB link",
}
#: Substring of a WARN message -> (code, meaning, action)
_KNOWN_WARNINGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "ibv_modify_qp failed",
        "ib_qp_transition_failed",
        "an InfiniBand/RoCE queue pair could not be brought up (address or route unreachable)",
        "check the GID index (NCCL_IB_GID_INDEX), routing and the port state on both hosts",
    ),
    (
        "NET/Plugin",
        "net_plugin",
        "the network plugin could not be loaded; NCCL uses its internal transports",
        "install the plugin the fabric needs (e.g. the OFI or IB-SHARP plugin) if expected",
    ),
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One kind of problem, folded over every line that shows it.

    Attributes:
        severity: ``error``, ``warning`` or ``info``.
        code: stable identifier (``ib_completion_error``, ``watchdog_timeout``, ...).
        title: one line, with the numbers that identify it.
        meaning: what it means.
        action: what to check first.
        count: lines folded into it.
        first: where it was first seen.
        where: processes (``host:pid``) or ranks involved, as printed.
    """

    severity: str
    code: str
    title: str
    meaning: str
    action: str
    count: int
    first: LineRef
    where: tuple[str, ...] = field(default_factory=tuple)


@dataclass(slots=True)
class _Slot:
    head: Finding
    count: int
    where: list[str]


class _Folder:
    """Findings keyed by (code, cause): the first line seen is kept, later ones counted."""

    def __init__(self) -> None:
        self.slots: dict[tuple[str, str], _Slot] = {}

    def add(self, key: tuple[str, str], head: Finding, where: str | None) -> None:
        slot = self.slots.get(key)
        if slot is None:
            self.slots[key] = _Slot(head, 1, [where] if where else [])
            return
        slot.count += 1
        if where and where not in slot.where:
            slot.where.append(where)

    def findings(self) -> list[Finding]:
        order = {"error": 0, "warning": 1, "info": 2}
        out = [
            replace(slot.head, count=slot.count, where=tuple(slot.where))
            for slot in self.slots.values()
        ]
        return sorted(out, key=lambda f: (order[f.severity], f.first.source, f.first.line))


def nccl_findings(
    records: Sequence[NcclRecord], watchdog: Sequence[WatchdogEvent]
) -> list[Finding]:
    """Fold NCCL records and watchdog events into findings, errors first."""
    folder = _Folder()
    for record in records:
        where = record.origin.process if record.origin is not None else None
        if isinstance(record, IbCompletionRecord):
            _ib_completion(folder, record, where)
        elif isinstance(record, ReturnTraceRecord):
            _return_trace(folder, record, where)
        elif isinstance(record, IbAsyncRecord):
            name = IBV_EVENTS.get(record.code, "") if record.code is not None else ""
            port = f" on {record.device}:{record.port}" if record.device else ""
            folder.add(
                ("ib_async_event", record.event),
                Finding(
                    "warning",
                    "ib_async_event",
                    f"IB async event '{record.event}'{port}" + (f" ({name})" if name else ""),
                    "the HCA reported a port or queue-pair event; a port error means the link "
                    "went down or flapped",
                    "check the port: cable/transceiver, switch port, ibstat state, link "
                    "error counters",
                    1,
                    record.at,
                ),
                where,
            )
        elif isinstance(record, NetRecord) and record.state == "no_device":
            folder.add(
                ("net_fallback", record.net),
                Finding(
                    "warning",
                    "net_fallback",
                    f"NET/{record.net}: no device found, NCCL falls back to the next transport",
                    "NCCL found no usable NIC of this kind; with IB missing it uses TCP sockets, "
                    "a fraction of InfiniBand bandwidth between nodes",
                    "check that /dev/infiniband and the HCAs are visible to the job (container "
                    "devices, NCCL_IB_HCA, rdma-core installed)",
                    1,
                    record.at,
                ),
                where,
            )
        elif isinstance(record, WarnRecord):
            _warning(folder, record, where)
    for event in watchdog:
        _watchdog(folder, event)
    return folder.findings()


def _ib_completion(folder: _Folder, record: IbCompletionRecord, where: str | None) -> None:
    name = ibv_status_name(record.status)
    meaning = IBV_WC_STATUS.get(record.status, (name, "unknown work-completion status"))[1]
    severity = "warning" if record.status == 5 else "error"
    folder.add(
        ("ib_completion_error", f"{record.status}:{record.peer}"),
        Finding(
            severity,
            "ib_completion_error",
            f"IB completion error status={record.status} ({name}) from peer {record.peer}, "
            f"vendor err {record.vendor_err}",
            meaning + "; NCCL aborts the operation and the collective hangs or fails",
            _IB_ACTION
            if record.status != 5
            else "find the first error before it (often status=12 on the same queue pair)",
            1,
            record.at,
        ),
        where,
    )


def _return_trace(folder: _Folder, record: ReturnTraceRecord, where: str | None) -> None:
    name = nccl_result_name(record.code)
    meaning = NCCL_RESULTS.get(record.code, (name, "unknown result code"))[1]
    folder.add(
        ("nccl_error_return", str(record.code)),
        Finding(
            "error",
            "nccl_error_return",
            f"NCCL returned {name} ({record.code}), first from {record.file}:{record.src_line}",
            meaning,
            _ACTIONS_BY_RESULT.get(record.code, "find the first error line before this trace"),
            1,
            record.at,
        ),
        where,
    )


def _warning(folder: _Folder, record: WarnRecord, where: str | None) -> None:
    for needle, code, meaning, action in _KNOWN_WARNINGS:
        if needle in record.message:
            folder.add(
                (code, needle),
                Finding("warning", code, record.message, meaning, action, 1, record.at),
                where,
            )
            return
    folder.add(
        ("nccl_warn", record.message),
        Finding(
            "warning",
            "nccl_warn",
            record.message,
            "NCCL printed a warning",
            "read the lines before it on the same process",
            1,
            record.at,
        ),
        where,
    )


_WATCHDOG_TEXT: dict[WatchdogKind, tuple[str, str, str, str]] = {
    WatchdogKind.TIMEOUT: (
        "error",
        "watchdog_timeout",
        "a collective did not complete within the process group timeout: a peer never joined "
        "it, or NCCL is stuck in the network",
        "see the hang verdict: find the ranks missing from the collective",
    ),
    WatchdogKind.BLOCKING_WAIT: (
        "error",
        "blocking_wait_timeout",
        "the CPU waited on the collective (TORCH_NCCL_BLOCKING_WAIT=1) past the timeout",
        "see the hang verdict",
    ),
    WatchdogKind.THREAD_DIED: (
        "error",
        "watchdog_thread_died",
        "the watchdog thread stopped with an exception and took the process down",
        "read the exception and the stack printed after it",
    ),
    WatchdogKind.TAKEDOWN: (
        "error",
        "process_takedown",
        "PyTorch is ending the process because NCCL work failed or timed out",
        "find the first failure on every rank (see the hang verdict)",
    ),
    WatchdogKind.FLIGHT_RECORDER_DISABLED: (
        "info",
        "flight_recorder_disabled",
        "no flight-recorder trace was kept, so no dump was written at the timeout",
        "set TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and TORCH_NCCL_DUMP_ON_TIMEOUT=1 so the next "
        "hang leaves per-rank dumps hpcscope can match",
    ),
}


def _watchdog(folder: _Folder, event: WatchdogEvent) -> None:
    rank = event.global_rank if event.global_rank is not None else event.group_rank
    where = f"rank {rank}" if rank is not None else None
    at = LineRef(event.source, event.line)
    if event.kind in _WATCHDOG_TEXT:
        severity, code, meaning, action = _WATCHDOG_TEXT[event.kind]
        what = f" in {event.op} SeqNum {event.seq}" if event.op else ""
        title = {
            "watchdog_timeout": f"watchdog timeout{what}",
            "blocking_wait_timeout": f"blocking wait timed out{what}",
        }.get(code, meaning.split(",")[0])
        key = (code, f"{event.op}:{event.seq}" if event.op else code)
        folder.add(key, Finding(severity, code, title, meaning, action, 1, at), where)
    elif "device used by this process is currently unknown" in event.message:
        folder.add(
            ("device_unknown", "device_unknown"),
            Finding(
                "warning",
                "device_unknown",
                "ProcessGroupNCCL guessed the GPU of the process",
                "the rank-to-GPU mapping was guessed; a wrong guess can hang the job",
                "pass device_id to init_process_group (or set the CUDA device before it)",
                1,
                at,
            ),
            where,
        )
