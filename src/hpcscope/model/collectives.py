"""What ranks report about their collectives: PyTorch watchdog lines and flight-recorder dumps.

These are the inputs of hang localisation (:mod:`hpcscope.analysis.hangs.localize`). They are plain
frozen values so that :mod:`hpcscope.ingest` can produce them and :mod:`hpcscope.analysis` can
read them without importing each other.

Two rank numbers exist in PyTorch's messages and they differ for sub-groups:

- the **global** rank, printed by PyTorch's C++ logger as a ``[rankN]:`` line prefix (and the
  file suffix of a flight-recorder dump, ``_dump_12``);
- the **group** rank, printed inside the message as ``[Rank n]`` or ``[PG ... Rank n]``: the
  rank within the process group named in the same message.

Process groups also have two names: ``pg_id`` (``PG ID 11``; the index of the group in one
process, which can differ between processes) and ``pg_guid``/``pg_name`` (``PG GUID 119``; the
name every member agrees on). Collectives are matched across ranks by the agreed name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class WatchdogKind(StrEnum):
    """The messages of ``ProcessGroupNCCL.cpp`` hpcscope reads (all torch versions seen)."""

    #: ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)``
    TIMEOUT = "timeout"
    #: ``Exception (either an error or timeout) detected by watchdog at work: N, last enqueued..``
    EXCEPTION = "exception"
    #: ``Timeout at NCCL work: N, last enqueued NCCL work: E, last completed NCCL work: C``
    TIMEOUT_AT = "timeout_at"
    #: torch 2.7+: ``failure detected by watchdog at work sequence id: N PG status: ...``
    FAILURE = "failure"
    #: ``Work WorkNCCL(...) timed out in blocking wait`` (``TORCH_NCCL_BLOCKING_WAIT=1``)
    BLOCKING_WAIT = "blocking_wait"
    #: ``Process group watchdog thread terminated with exception: ...``
    THREAD_DIED = "thread_died"
    #: ``Some NCCL operations have failed or timed out`` / ``taking the entire process down``
    TAKEDOWN = "takedown"
    #: ``Stack trace of the failed collective not found, potentially because FlightRecorder is
    #: disabled`` (torch 2.7+)
    FLIGHT_RECORDER_DISABLED = "flight_recorder_disabled"
    #: ``ProcessGroupNCCL preparing to dump debug info``
    DUMP_DEBUG_INFO = "dump_debug_info"
    #: any other ``ProcessGroupNCCL.cpp`` line (kept with its text)
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class WatchdogEvent:
    """One ``ProcessGroupNCCL.cpp`` line of a PyTorch job's log.

    Attributes:
        kind: which message this is.
        source: file the line came from; ``line`` is 1-based.
        severity: the glog letter, ``E``, ``W``, ``I`` or ``F``.
        global_rank: from the ``[rankN]:`` prefix (torch >= 2.2), else None.
        group_rank: ``[Rank n]`` inside the message: the rank within the process group.
        pg_id: ``PG n`` (torch 2.5) or ``PG ID n`` (2.6+): the group's index in this process.
        pg_guid: ``PG GUID n`` (2.6+): the group's name, the same on every member.
        pg_desc: ``(default_pg)`` after the GUID when printed.
        seq: the collective sequence number (``SeqNum=``, ``at work:``, ``work sequence id:``).
        op: ``OpType=`` (``ALLREDUCE``, ``_ALLGATHER_BASE``, ...).
        numel_in: ``NumelIn=`` (torch >= 2.0; None in 1.x messages).
        numel_out: ``NumelOut=``.
        timeout_seconds: ``Timeout(ms)=`` in seconds.
        ran_seconds: ``ran for N milliseconds`` in seconds.
        last_enqueued: last collective enqueued by this rank in this group.
        last_completed: last collective this rank's watchdog saw complete in this group.
        message: the text after the ``ProcessGroupNCCL.cpp:LINE]`` marker.
        torch_format: the message generation, ``1.x``, ``2.x``, ``2.5``, ``2.6+`` or ``2.7+``
            (deduced from the prefix shapes; a lower bound, not the exact version).
        stack: the C++ stack lines printed after a thread-died message.
    """

    kind: WatchdogKind
    source: str
    line: int
    severity: str
    global_rank: int | None
    group_rank: int | None
    pg_id: int | None
    pg_guid: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_seconds: float | None
    ran_seconds: float | None
    last_enqueued: int | None
    last_completed: int | None
    message: str
    torch_format: str
    stack: tuple[str, ...] = ()

    @property
    def queue_depth(self) -> int | None:
        """Collectives enqueued but not seen complete (``last enqueued - last completed``)."""
        if self.last_enqueued is None or self.last_completed is None:
            return None
        return self.last_enqueued - self.last_completed


@dataclass(frozen=True, slots=True)
class PgConfig:
    """A process group as a flight-recorder dump describes it (``pg_config``).

    Attributes:
        name: the group's agreed name (the ``pg_config`` key, ``process_group[0]`` in entries).
        desc: its description (``default_pg``, ``TENSOR_MODEL_PARALLEL_GROUP``, ...).
        ranks: global ranks of its members, in group-rank order (group rank i = ``ranks[i]``).
    """

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PgStatus:
    """Progress of one process group on one rank (``pg_status``).

    The counters are sequence numbers of the group's work: collective sequence ids, or p2p
    sequence ids for groups that only ran point-to-point operations.

    Attributes:
        local_id: the ``pg_status`` key, the group's index in this process.
        name: the group's agreed name, resolved from the entries (or, when ``name_inferred``,
            from the creation order of ``pg_config`` and ``pg_status`` keys).
        last_enqueued: last work the CPU enqueued.
        last_started: last work seen started on the GPU (-1 unless timing is enabled).
        last_completed: last work the watchdog saw complete.
    """

    local_id: str
    name: str | None
    name_inferred: bool
    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True, slots=True)
class FrEntry:
    """One entry of a flight-recorder ring buffer: one collective or p2p operation on one rank.

    Sizes are tensor shapes (one per tensor), dtypes their PyTorch names (``BFloat16``).
    ``state`` is ``scheduled``, ``started`` or ``completed``; ``started`` is only recorded
    with ``TORCH_NCCL_ENABLE_TIMING=1``. Times are nanoseconds since the epoch on that host.
    """

    record_id: int
    pg_local_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int
    profiling_name: str
    is_p2p: bool
    state: str
    time_created_ns: int
    time_started_ns: int | None
    time_completed_ns: int | None
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_sizes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    timeout_seconds: float | None
    duration_seconds: float | None
    retired: bool
    thread_name: str

    @property
    def seq(self) -> int:
        """The sequence number ``pg_status`` counts for this entry (p2p or collective)."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    @property
    def op(self) -> str:
        """The operation without the ``nccl:`` prefix and p2p peers (``all_to_all``, ``send``)."""
        name = self.profiling_name.split(" ", 1)[0]
        return name.split(":", 1)[1] if ":" in name else name


@dataclass(frozen=True, slots=True)
class FlightRecorderDump:
    """One rank's flight-recorder dump (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``).

    Attributes:
        source: the file it was read from.
        rank: the global rank (a ``rank`` key when the dump has one, else the digits ending the
            file name, as PyTorch's ``fr_trace`` reads it); None when neither exists.
        version: the dump schema version (``"2.9"``).
        nccl_version: NCCL's version as the dump states it.
        pg_configs: every process group this rank knows.
        pg_status: per-group progress counters on this rank.
        entries: the ring buffer, oldest first.
        warnings: fields not understood or values replaced; the rest was read.
    """

    source: str
    rank: int | None
    version: str
    nccl_version: str | None
    pg_configs: tuple[PgConfig, ...]
    pg_status: tuple[PgStatus, ...]
    entries: tuple[FrEntry, ...]
    warnings: tuple[str, ...]

    def config(self, name: str) -> PgConfig | None:
        """The process group called ``name``, if this dump knows it."""
        for config in self.pg_configs:
            if config.name == name:
                return config
        return None
