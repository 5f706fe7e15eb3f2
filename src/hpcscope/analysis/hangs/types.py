"""The values a hang localisation returns
(:func:`hpcscope.analysis.hangs.localize.localize_hang`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    """What the evidence says, strongest first."""

    #: A collective some ranks entered and others never did: the missing ranks are named.
    HANG_LOCALIZED = "hang_localized"
    #: Ranks of one group wait in different collectives (SeqNum/OpType differ).
    DESYNC = "desync"
    #: Timeouts reported, every reporting rank in the same collective, nobody known missing.
    TIMEOUT_UNLOCALIZED = "timeout_unlocalized"
    #: One rank's view only: what it waits for is known, who it waits for is not.
    INSUFFICIENT_DATA = "insufficient_data"
    #: No timeout, no collective stuck.
    NO_HANG = "no_hang"


class Evidence(StrEnum):
    """Where a finding comes from."""

    FLIGHT_RECORDER = "flight_recorder"
    WATCHDOG = "watchdog"


@dataclass(frozen=True, slots=True)
class HungCollective:
    """A collective of one process group that did not complete on every member.

    Attributes:
        evidence: flight-recorder dumps or watchdog lines.
        pg_name: the group's agreed name (``PG GUID``, ``pg_config`` key) when known.
        pg_desc: its description (``EXPERT_MODEL_PARALLEL_GROUP``) when known.
        pg_ranks: global ranks of the group's members, when known.
        seq: the collective's sequence number in the group.
        op: the operation (``all_to_all``, ``ALLREDUCE``).
        size: the input shape as ``4027x5120`` (the lowest entered rank's), or numel.
        dtype: the input dtype (``BFloat16``) when known.
        sizes_by_rank: ``(rank, shape)`` for every rank that entered (all_to_all splits differ).
        entered_ranks: ranks that enqueued it.
        missing_ranks: members that never enqueued it: the ranks the others wait for.
        not_completed_ranks: ranks that enqueued it and did not see it complete.
        no_data_ranks: members with no dump or line to tell.
        primary: the first collective the missing ranks failed to join in its connected set
            of groups (independent hangs in disjoint rank sets each have one).
        timeout_seconds: the watchdog timeout of the collective when known.
        time_created_ns: when the earliest entered rank enqueued it (flight recorder).
    """

    evidence: Evidence
    pg_name: str | None
    pg_desc: str | None
    pg_ranks: tuple[int, ...]
    seq: int | None
    op: str | None
    size: str | None
    dtype: str | None
    sizes_by_rank: tuple[tuple[int, str], ...]
    entered_ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    not_completed_ranks: tuple[int, ...]
    no_data_ranks: tuple[int, ...]
    primary: bool
    timeout_seconds: float | None
    time_created_ns: int | None


@dataclass(frozen=True, slots=True)
class Position:
    """Where some ranks of a group stand: the collective they wait in."""

    seq: int | None
    op: str | None
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Desync:
    """Ranks of one process group waiting in different collectives."""

    pg: str
    positions: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Work a rank enqueued in a group and did not see complete.

    ``oldest_pending`` describes the oldest such collective (``nccl:all_to_all seq 20530
    4096x5120 BFloat16``) when a flight-recorder entry shows it.
    """

    rank: int
    pg: str
    last_enqueued: int
    last_completed: int
    depth: int
    evidence: Evidence
    oldest_pending: str | None


@dataclass(frozen=True, slots=True)
class Culprit:
    """A rank the evidence points at, with why.

    ``kind``: ``never_entered`` (peers wait for it in a collective it never enqueued),
    ``completion_stalled`` (peers completed collectives it enqueued but never saw complete:
    its GPU or watchdog is stuck), ``silent`` (printed no timeout while its peers did),
    ``desynced`` (waits in a different collective than its group). ``confidence`` is
    ``high``, ``medium`` or ``low`` (low: world size assumed from the highest rank seen).
    """

    rank: int
    kind: str
    confidence: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class P2pUnmatched:
    """Point-to-point operations pending on one side with no pending counterpart on the other.

    Usually a consequence (the peer is blocked elsewhere), reported as context.
    """

    pg: str
    src_rank: int
    dst_rank: int
    pending_sends: int
    pending_recvs: int


@dataclass(frozen=True, slots=True)
class HangReport:
    """Everything :func:`~hpcscope.analysis.hangs.localize.localize_hang` concluded.

    ``hung`` lists primary collectives first. ``world_size_source`` says where the world
    size came from: ``given``, ``nccl_init``, ``flight_recorder``, ``highest_rank_seen`` or
    None when unknown.
    """

    verdict: Verdict
    summary: str
    hung: tuple[HungCollective, ...]
    desyncs: tuple[Desync, ...]
    queue_depths: tuple[QueueDepth, ...]
    culprits: tuple[Culprit, ...]
    p2p_unmatched: tuple[P2pUnmatched, ...]
    world_size: int | None
    world_size_source: str | None
    ranks_with_dumps: tuple[int, ...]
    ranks_with_timeouts: tuple[int, ...]
    notes: tuple[str, ...]
