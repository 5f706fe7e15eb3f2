"""PyTorch ``ProcessGroupNCCL`` watchdog lines -> :class:`~hpcscope.model.collectives.WatchdogEvent`
(one event per line).

Every generation of the message seen in real logs is read (``training-steps.md`` §8):

- torch 1.x: ``[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation
  timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for ...``
  (no global rank, no ``NumelIn``/``NumelOut``);
- torch 2.x: a ``[rankN]:`` prefix with the global rank and a timestamp in the glog header
  (``[E513 13:25:57.714781669 ProcessGroupNCCL.cpp:616]``);
- torch 2.5: ``[PG 1 Rank 0]``; torch 2.6+: ``[PG ID 0 PG GUID 0(default_pg) Rank 1]``;
- torch 2.7+: ``failure detected by watchdog at work sequence id: N PG status: ...``.

``[Rank n]`` is the rank *within the process group*; ``[rankN]:`` the global rank.
"""

from __future__ import annotations

import re

from hpcscope.model.collectives import WatchdogEvent, WatchdogKind
from hpcscope.model.nccl import LineRef

PT_PREFIX = re.compile(
    r"(?:\[rank(?P<grank>\d+)\]:)?\[(?P<sev>[EWIF])(?:(?P<mmdd>\d{3,4}) "
    r"(?P<hms>\d\d:\d\d:\d\d\.\d+))? (?P<src>ProcessGroupNCCL\.cpp):(?P<line>\d+)\]"
)
PT_PG = re.compile(
    r"\[(?:PG (?P<pg>\d+)|PG ID (?P<pgid>\d+) PG GUID (?P<guid>\d+)(?:\((?P<desc>[^)]*)\))?) "
    r"Rank (?P<rank>\d+)\]"
)
PT_RANK = re.compile(r"\[Rank (?P<rank>\d+)\]")
PT_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?, "
    r"Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds before timing out"
)
PT_EXCEPTION_AT = re.compile(
    r"detected by watchdog at work: (?P<seq>\d+), last enqueued NCCL work: (?P<enq>\d+), "
    r"last completed NCCL work: (?P<done>\d+)"
)
PT_TIMEOUT_AT = re.compile(
    r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: (?P<enq>\d+), "
    r"last completed NCCL work: (?P<done>\d+)"
)
PT_FAILURE_27 = re.compile(
    r"failure detected by watchdog at work sequence id: (?P<seq>\d+) PG status: "
    r"last enqueued work: (?P<enq>\d+), last completed work: (?P<done>\d+)"
)
PT_BLOCKING = re.compile(
    r"Work WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?.*?"
    r"Timeout\(ms\)=(?P<timeout_ms>\d+)\) timed out in blocking wait"
)
PT_THREAD_DIED = re.compile(
    r"Process group watchdog thread terminated with exception: (?P<what>.+)$"
)
PT_TAKEDOWN = re.compile(
    r"Some NCCL operations have failed or timed out|taking the entire process down"
)
PT_FR_DISABLED = re.compile(r"potentially because FlightRecorder is disabled")
PT_DUMP = re.compile(r"preparing to dump debug info")
#: C++ stack lines that follow a thread-died message.
STACK_LINE = re.compile(r"^(?:Exception raised from \S+ at \S+|frame #\d+: )")


def parse_watchdog_line(text: str, at: LineRef) -> WatchdogEvent | None:
    """Parse one ``ProcessGroupNCCL.cpp`` line (launcher prefix removed), None for other lines."""
    prefix = PT_PREFIX.search(text)
    if prefix is None:
        return None
    message = text[prefix.end() :].strip()
    pg = PT_PG.search(message)
    rank = pg["rank"] if pg is not None else _group_rank(message)
    fields = _Fields()
    kind = _classify(message, fields)
    timeout_ms = fields.timeout_ms
    ran_ms = fields.ran_ms
    return WatchdogEvent(
        kind=kind,
        source=at.source,
        line=at.line,
        severity=prefix["sev"],
        global_rank=int(prefix["grank"]) if prefix["grank"] else None,
        group_rank=int(rank) if rank is not None else None,
        pg_id=_pg_id(pg),
        pg_guid=pg["guid"] if pg is not None else None,
        pg_desc=pg["desc"] if pg is not None else None,
        seq=fields.seq,
        op=fields.op,
        numel_in=fields.numel_in,
        numel_out=fields.numel_out,
        timeout_seconds=timeout_ms / 1000.0 if timeout_ms is not None else None,
        ran_seconds=ran_ms / 1000.0 if ran_ms is not None else None,
        last_enqueued=fields.enqueued,
        last_completed=fields.completed,
        message=message,
        torch_format=_torch_format(prefix, pg, kind),
    )


class _Fields:
    """The numbers one message carries (filled by :func:`_classify`)."""

    __slots__ = (
        "completed",
        "enqueued",
        "numel_in",
        "numel_out",
        "op",
        "ran_ms",
        "seq",
        "timeout_ms",
    )

    def __init__(self) -> None:
        self.seq: int | None = None
        self.op: str | None = None
        self.numel_in: int | None = None
        self.numel_out: int | None = None
        self.timeout_ms: int | None = None
        self.ran_ms: int | None = None
        self.enqueued: int | None = None
        self.completed: int | None = None

    def work(self, m: re.Match[str]) -> None:
        self.seq = int(m["seq"])
        self.op = m["op"]
        self.numel_in = int(m["numel_in"]) if m["numel_in"] else None
        self.numel_out = int(m["numel_out"]) if m["numel_out"] else None
        self.timeout_ms = int(m["timeout_ms"])

    def status(self, m: re.Match[str]) -> None:
        self.seq = int(m["seq"])
        self.enqueued = int(m["enq"])
        self.completed = int(m["done"])


def _classify(message: str, fields: _Fields) -> WatchdogKind:
    died = PT_THREAD_DIED.search(message)
    if died is not None:
        # The exception text usually embeds the timeout message: keep its numbers.
        inner = PT_TIMEOUT.search(died["what"])
        if inner is not None:
            fields.work(inner)
            fields.ran_ms = int(inner["ran_ms"])
        return WatchdogKind.THREAD_DIED
    if m := PT_TIMEOUT.search(message):
        fields.work(m)
        fields.ran_ms = int(m["ran_ms"])
        return WatchdogKind.TIMEOUT
    if m := PT_EXCEPTION_AT.search(message):
        fields.status(m)
        return WatchdogKind.EXCEPTION
    if m := PT_TIMEOUT_AT.search(message):
        fields.status(m)
        return WatchdogKind.TIMEOUT_AT
    if m := PT_FAILURE_27.search(message):
        fields.status(m)
        return WatchdogKind.FAILURE
    if m := PT_BLOCKING.search(message):
        fields.work(m)
        return WatchdogKind.BLOCKING_WAIT
    if PT_TAKEDOWN.search(message):
        return WatchdogKind.TAKEDOWN
    if PT_FR_DISABLED.search(message):
        return WatchdogKind.FLIGHT_RECORDER_DISABLED
    if PT_DUMP.search(message):
        return WatchdogKind.DUMP_DEBUG_INFO
    return WatchdogKind.OTHER


def _group_rank(message: str) -> str | None:
    m = PT_RANK.search(message)
    return m["rank"] if m is not None else None


def _pg_id(pg: re.Match[str] | None) -> int | None:
    if pg is None:
        return None
    value = pg["pgid"] if pg["pgid"] is not None else pg["pg"]
    return int(value) if value is not None else None


def _torch_format(prefix: re.Match[str], pg: re.Match[str] | None, kind: WatchdogKind) -> str:
    """The oldest torch generation that prints a line of this shape."""
    if kind in (WatchdogKind.FAILURE, WatchdogKind.FLIGHT_RECORDER_DISABLED):
        return "2.7+"
    if pg is not None and pg["guid"] is not None:
        return "2.6+"
    if pg is not None:
        return "2.5"
    if prefix["grank"] is None and prefix["mmdd"] is None:
        return "1.x"
    return "2.x"
