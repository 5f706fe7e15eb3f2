"""Localise a hang from PyTorch watchdog lines alone (every torch generation).

Each rank that times out prints the collective it waits in (``SeqNum``, ``OpType``); from torch
2.5 on it also prints its group and ``last enqueued``/``last completed`` counters. Method:

1. A ``Watchdog caught`` line names no group; it inherits the group of the same rank's
   ``Exception ... at work: N`` / ``Timeout at NCCL work: N`` line with the same sequence
   number, or, failing that, the only group any rank printed for that sequence number.
2. Per group, ranks are placed at the collective they wait in. Ranks at different
   ``SeqNum``/``OpType`` are **desynced**.
3. Ranks that print nothing while their peers time out are the likely culprits (a dead or
   stuck process cannot print). Which ranks *should* have printed needs the group's members:
   the world for the default group (``world_size``), ``pg_members`` (from flight-recorder
   ``pg_config``) for sub-groups. When the world size is unknown, ranks below the highest
   rank seen are reported with low confidence.
4. ``last enqueued - last completed`` is the queue depth at failure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hpcscope.analysis.hangs.types import (
    Desync,
    Evidence,
    HungCollective,
    Position,
    QueueDepth,
)
from hpcscope.model.collectives import WatchdogEvent, WatchdogKind

_WAITING = (WatchdogKind.TIMEOUT, WatchdogKind.BLOCKING_WAIT, WatchdogKind.THREAD_DIED)
_STATUS = (WatchdogKind.EXCEPTION, WatchdogKind.TIMEOUT_AT, WatchdogKind.FAILURE)
_DEFAULT = "default"


@dataclass(slots=True)
class WdFindings:
    """What the watchdog lines show, before verdict and ranking."""

    hung: list[HungCollective] = field(default_factory=list)
    desyncs: list[Desync] = field(default_factory=list)
    queue_depths: list[QueueDepth] = field(default_factory=list)
    evidence: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    #: (rank, reason) for ranks assumed to exist (world size unknown)
    assumed_silent: list[tuple[int, str]] = field(default_factory=list)
    reporting_ranks: set[int] = field(default_factory=set)
    timeouts: int = 0
    group_local_only: bool = False


def rank_of(event: WatchdogEvent) -> int | None:
    """The global rank when printed; else the group rank (torch 1.x prints only that)."""
    return event.global_rank if event.global_rank is not None else event.group_rank


def analyse_watchdog(
    events: Sequence[WatchdogEvent],
    *,
    world_size: int | None,
    pg_members: Mapping[str, tuple[int, ...]],
) -> WdFindings:
    """Apply the method of the module docstring."""
    findings = WdFindings()
    findings.group_local_only = bool(events) and all(e.global_rank is None for e in events)
    findings.reporting_ranks = {r for e in events if (r := rank_of(e)) is not None}
    keys = _group_keys(events)
    # group key -> rank -> (seq, op, event)
    where: dict[str, dict[int, tuple[int, str | None, WatchdogEvent]]] = defaultdict(dict)
    for index, event in enumerate(events):
        rank = rank_of(event)
        if rank is None or event.seq is None:
            continue
        if event.kind in _STATUS:
            _queue_depth(event, rank, keys[index], findings)
        if event.kind not in _WAITING and event.kind not in _STATUS:
            continue
        findings.timeouts += event.kind in _WAITING
        placed = where[keys[index]]
        previous = placed.get(rank)
        op = event.op or (previous[1] if previous and previous[0] == event.seq else None)
        if (
            previous is None
            or event.seq < previous[0]
            or (event.seq == previous[0] and previous[1] is None)
        ):
            placed[rank] = (event.seq, op, event)
    descs = {k: e.pg_desc for k, e in zip(keys, events, strict=True) if e.pg_desc}
    for key in sorted(where):
        _group(key, descs.get(key), where[key], world_size, pg_members, findings)
    return findings


def _group_keys(events: Sequence[WatchdogEvent]) -> list[str]:
    """Step 1: the group each event belongs to (``default`` when no group is printed)."""
    own = [_own_key(e) for e in events]
    by_rank_seq: dict[tuple[int | None, int], str] = {}
    by_seq: dict[int, set[str]] = defaultdict(set)
    for event, key in zip(events, own, strict=True):
        if key is not None and event.seq is not None:
            by_rank_seq[(rank_of(event), event.seq)] = key
            by_seq[event.seq].add(key)
    keys = []
    for event, key in zip(events, own, strict=True):
        if key is None and event.seq is not None:
            key = by_rank_seq.get((rank_of(event), event.seq))
            if key is None and len(by_seq.get(event.seq, ())) == 1:
                key = next(iter(by_seq[event.seq]))
        keys.append(key if key is not None else _DEFAULT)
    return keys


def _own_key(event: WatchdogEvent) -> str | None:
    if event.pg_guid is not None:
        return event.pg_guid
    if event.pg_id is not None:
        return f"id:{event.pg_id}"
    return None


def label(key: str, events_desc: str | None = None) -> str:
    """How a group key is shown: ``PG GUID 119``, ``PG 1``, ``default group``."""
    if key == _DEFAULT:
        return "default group (no PG printed)"
    if key.startswith("id:"):
        return f"PG {key[3:]}"
    return f"PG GUID {key}" + (f" ({events_desc})" if events_desc else "")


def _queue_depth(event: WatchdogEvent, rank: int, key: str, findings: WdFindings) -> None:
    if event.last_enqueued is None or event.last_completed is None:
        return
    if any(q.rank == rank and q.pg == label(key) for q in findings.queue_depths):
        return
    findings.queue_depths.append(
        QueueDepth(
            rank=rank,
            pg=label(key),
            last_enqueued=event.last_enqueued,
            last_completed=event.last_completed,
            depth=event.last_enqueued - event.last_completed,
            evidence=Evidence.WATCHDOG,
            oldest_pending=None,
        )
    )


def _group(
    key: str,
    desc: str | None,
    placed: dict[int, tuple[int, str | None, WatchdogEvent]],
    world_size: int | None,
    pg_members: Mapping[str, tuple[int, ...]],
    findings: WdFindings,
) -> None:
    """Steps 2-3 for one group."""
    name = label(key, desc)
    # A status line (``at work: N``) names no op: it takes the op another rank printed for N.
    ops: dict[int, set[str]] = defaultdict(set)
    for seq, op, _ in placed.values():
        if op is not None:
            ops[seq].add(op)
    positions: dict[tuple[int, str | None], list[int]] = defaultdict(list)
    for rank, (seq, op, _) in sorted(placed.items()):
        if op is None and len(ops[seq]) == 1:
            op = next(iter(ops[seq]))
        positions[(seq, op)].append(rank)
    ordered = sorted(positions.items(), key=lambda kv: (-len(kv[1]), kv[0][0]))
    (seq, op), entered = ordered[0]
    if len(ordered) > 1:
        findings.desyncs.append(
            Desync(name, tuple(Position(s, o, tuple(r)) for (s, o), r in ordered))
        )
        for (other_seq, other_op), ranks in ordered[1:]:
            for rank in ranks:
                findings.evidence.setdefault((rank, "desynced"), []).append(
                    f"{name}: waits in {other_op or '?'} SeqNum {other_seq} while ranks "
                    f"{_ranks(entered)} wait in {op or '?'} SeqNum {seq}"
                )
    members = _members(key, desc, world_size, pg_members)
    silent = sorted(set(members) - findings.reporting_ranks) if members else []
    for rank in silent:
        findings.evidence.setdefault((rank, "silent"), []).append(
            f"{name}: printed no watchdog line while {_ranks(entered)} timed out in "
            f"{op or '?'} SeqNum {seq}"
        )
    if not members and key == _DEFAULT and world_size is None and findings.reporting_ranks:
        highest = max(findings.reporting_ranks)
        for rank in range(highest):
            if rank not in findings.reporting_ranks:
                findings.assumed_silent.append(
                    (
                        rank,
                        f"{name}: printed no watchdog line; the world size is unknown and "
                        f"assumed >= {highest + 1} from the highest rank seen",
                    )
                )
    event = next(
        (placed[r][2] for r in entered if placed[r][2].op is not None), placed[entered[0]][2]
    )
    numel = event.numel_in
    findings.hung.append(
        HungCollective(
            evidence=Evidence.WATCHDOG,
            pg_name=None if key == _DEFAULT or key.startswith("id:") else key,
            pg_desc=desc,
            pg_ranks=tuple(members),
            seq=seq,
            op=op,
            size=f"{numel} elements" if numel is not None else None,
            dtype=None,
            sizes_by_rank=(),
            entered_ranks=tuple(entered),
            missing_ranks=tuple(silent),
            not_completed_ranks=tuple(entered),
            no_data_ranks=(),
            primary=False,
            timeout_seconds=event.timeout_seconds,
            time_created_ns=None,
        )
    )


def _members(
    key: str, desc: str | None, world_size: int | None, pg_members: Mapping[str, tuple[int, ...]]
) -> list[int]:
    if key in pg_members:
        return list(pg_members[key])
    is_default = key in (_DEFAULT, "0") or desc == "default_pg"
    if is_default and world_size is not None:
        return list(range(world_size))
    return []


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 12`` or ``ranks 9,14``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in ranks)
