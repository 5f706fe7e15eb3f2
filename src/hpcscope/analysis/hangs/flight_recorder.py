"""Match collectives across ranks' flight-recorder dumps and find where a job hung.

Method (the same evidence NVRx's ``CollectiveAnalyzer`` and PyTorch's ``fr_trace`` use, with
an explicit rule instead of a wavefront heuristic):

1. Groups are matched across ranks by their agreed name (``process_group[0]``/``pg_config``
   key), never by the local ``pg_id``, which differs between processes.
2. Per group, every dumped member's ``pg_status`` gives the last collective it *enqueued* and
   the last it saw *complete*. A collective blocks until every member has joined, so in a
   group where members enqueued different amounts, the first collective some member never
   enqueued (``min(last_enqueued) + 1``) is where the others wait for it: those members are
   **missing**. The op, shape and dtype come from the entries of the ranks that entered it.
3. A member that enqueued a collective its peers saw complete, but never saw it complete
   itself, is **completion-stalled**: its GPU or its watchdog stopped making progress (a GPU
   error does this).
4. Groups whose buffer holds point-to-point work are left out of step 2: their counters are
   per-rank p2p sequence numbers, not comparable across ranks. Their pending sends and
   receives are paired instead and reported as context.
5. Hung collectives are grouped into connected sets of ranks (groups sharing a member); in
   each set the **primary** one is the collective most entered ranks enqueued first (their
   own record order), ties broken by creation time: the point where the missing ranks
   stopped. Independent hangs in disjoint rank sets each get one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hpcscope.analysis.hangs.types import Evidence, HungCollective, P2pUnmatched, QueueDepth
from hpcscope.model.collectives import FlightRecorderDump, FrEntry, PgStatus


@dataclass(slots=True)
class FrGroup:
    """One process group as all dumps together describe it."""

    name: str
    desc: str = ""
    ranks: set[int] = field(default_factory=set)
    #: members in group-rank order (group rank i is ``order[i]``), from ``pg_config``
    order: tuple[int, ...] = ()
    status: dict[int, PgStatus] = field(default_factory=dict)
    entries: dict[int, dict[int, FrEntry]] = field(default_factory=dict)
    p2p: bool = False


@dataclass(slots=True)
class FrFindings:
    """What the dumps show, before verdict and ranking."""

    hung: list[HungCollective] = field(default_factory=list)
    queue_depths: list[QueueDepth] = field(default_factory=list)
    p2p_unmatched: list[P2pUnmatched] = field(default_factory=list)
    #: (rank, kind) -> reasons
    evidence: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    comparable_groups: int = 0
    #: collectives every member entered and some never saw complete
    stuck_everywhere: list[HungCollective] = field(default_factory=list)


def collect_groups(dumps: Sequence[FlightRecorderDump]) -> dict[str, FrGroup]:
    """Merge every dump's groups, counters and entries by group name (dumps need a rank)."""
    groups: dict[str, FrGroup] = {}
    for dump in dumps:
        if dump.rank is None:
            continue
        for config in dump.pg_configs:
            group = groups.setdefault(config.name, FrGroup(config.name))
            group.desc = group.desc or config.desc
            group.ranks.update(config.ranks)
            group.order = group.order or config.ranks
        for status in dump.pg_status:
            if status.name is not None:
                groups.setdefault(status.name, FrGroup(status.name)).status[dump.rank] = status
        for entry in dump.entries:
            group = groups.setdefault(entry.pg_name, FrGroup(entry.pg_name, entry.pg_desc))
            group.desc = group.desc or entry.pg_desc
            group.p2p = group.p2p or entry.is_p2p
            group.entries.setdefault(dump.rank, {})[entry.seq] = entry
    return groups


def analyse_dumps(groups: dict[str, FrGroup]) -> FrFindings:
    """Apply steps 2-5 of the module docstring to every group."""
    findings = FrFindings()
    for name in sorted(groups, key=_numeric):
        group = groups[name]
        _queue_depths(group, findings)
        if group.p2p:
            _p2p(group, findings)
        elif len(group.status) >= 2:
            findings.comparable_groups += 1
            _collective(group, findings)
    findings.hung = _mark_primary(findings.hung, groups)
    findings.stuck_everywhere = _mark_primary(findings.stuck_everywhere, groups)
    return findings


def _collective(group: FrGroup, findings: FrFindings) -> None:
    enqueued = {rank: s.last_enqueued for rank, s in group.status.items()}
    completed = {rank: s.last_completed for rank, s in group.status.items()}
    label = _label(group)
    top_done = max(completed.values())
    peers_done = sorted(r for r, c in completed.items() if c == top_done)
    for rank in sorted(group.status):
        if enqueued[rank] >= top_done > completed[rank]:
            findings.evidence.setdefault((rank, "completion_stalled"), []).append(
                f"{label}: {_ranks(peers_done)} saw seq {top_done} complete; rank {rank} "
                f"enqueued it but its last completed is seq {completed[rank]}"
            )
    low, high = min(enqueued.values()), max(enqueued.values())
    if low == high:
        oldest = min(completed.values()) + 1
        if oldest <= low:
            # Every member entered, some never saw it complete: stuck inside NCCL (network,
            # GPU) or queued behind another group's collective. Kept aside: only reported
            # when no group has a missing member.
            findings.stuck_everywhere.append(_hung(group, oldest, sorted(enqueued), [], completed))
        return
    seq = low + 1
    entered = sorted(r for r, e in enqueued.items() if e >= seq)
    missing = sorted(r for r, e in enqueued.items() if e < seq)
    hung = _hung(group, seq, entered, missing, completed)
    findings.hung.append(hung)
    for rank in missing:
        findings.evidence.setdefault((rank, "never_entered"), []).append(
            f"{label}: {_ranks(entered)} entered {hung.op + ' ' if hung.op else ''}seq {seq}; "
            f"rank {rank} never enqueued it (last enqueued seq {enqueued[rank]})"
        )


def _hung(
    group: FrGroup,
    seq: int,
    entered: list[int],
    missing: list[int],
    completed: dict[int, int],
) -> HungCollective:
    """The collective ``seq`` of ``group`` as the entries of the ranks that entered it show."""
    at_seq = {r: group.entries.get(r, {}).get(seq) for r in entered}
    present = {r: e for r, e in at_seq.items() if e is not None}
    names = Counter(e.profiling_name for e in present.values())
    first = present[min(present)] if present else None
    members = tuple(sorted(group.ranks)) if group.ranks else tuple(sorted(completed))
    return HungCollective(
        evidence=Evidence.FLIGHT_RECORDER,
        pg_name=group.name,
        pg_desc=group.desc or None,
        pg_ranks=members,
        seq=seq,
        op=names.most_common(1)[0][0] if names else None,
        size=_shape(first.input_sizes[0]) if first and first.input_sizes else None,
        dtype=first.input_dtypes[0] if first and first.input_dtypes else None,
        sizes_by_rank=tuple(
            (r, _shape(e.input_sizes[0])) for r, e in sorted(present.items()) if e.input_sizes
        ),
        entered_ranks=tuple(entered),
        missing_ranks=tuple(missing),
        not_completed_ranks=tuple(r for r in entered if completed[r] < seq),
        no_data_ranks=tuple(r for r in members if r not in group.status),
        primary=False,
        timeout_seconds=first.timeout_seconds if first else None,
        time_created_ns=min((e.time_created_ns for e in present.values()), default=None),
    )


def _queue_depths(group: FrGroup, findings: FrFindings) -> None:
    for rank in sorted(group.status):
        status = group.status[rank]
        depth = status.last_enqueued - status.last_completed
        if depth <= 0:
            continue
        pending = [e for s, e in group.entries.get(rank, {}).items() if s > status.last_completed]
        oldest = min(pending, key=lambda e: e.seq) if pending else None
        findings.queue_depths.append(
            QueueDepth(
                rank=rank,
                pg=_label(group),
                last_enqueued=status.last_enqueued,
                last_completed=status.last_completed,
                depth=depth,
                evidence=Evidence.FLIGHT_RECORDER,
                oldest_pending=_describe(oldest) if oldest else None,
            )
        )


def _p2p(group: FrGroup, findings: FrFindings) -> None:
    """Pair pending sends and receives (group-local peers mapped to global ranks)."""
    order = list(group.order)
    sends: Counter[tuple[int, int]] = Counter()
    recvs: Counter[tuple[int, int]] = Counter()
    for rank, entries in group.entries.items():
        done = group.status[rank].last_completed if rank in group.status else -1
        for entry in entries.values():
            if not entry.is_p2p or entry.seq <= done or entry.state == "completed":
                continue
            pair = _peers(entry.profiling_name, order)
            if pair is None:
                continue
            (sends if entry.op == "send" else recvs)[pair] += 1
    dumped = set(group.status) | set(group.entries)
    for src, dst in sorted(set(sends) | set(recvs)):
        s, r = sends[(src, dst)], recvs[(src, dst)]
        waiting_side_known = (dst if s > r else src) in dumped
        if s != r and waiting_side_known:
            findings.p2p_unmatched.append(P2pUnmatched(_label(group), src, dst, s, r))


def _peers(profiling_name: str, order: list[int]) -> tuple[int, int] | None:
    """``nccl:send 3->2`` -> (global 3, global 2); ``nccl:recv 3<-0`` -> (global 0, global 3)."""
    parts = profiling_name.split(" ", 1)
    if len(parts) != 2:
        return None
    text = parts[1].strip()
    try:
        if "->" in text:
            a, b = (int(x) for x in text.split("->"))
            src, dst = a, b
        elif "<-" in text:
            a, b = (int(x) for x in text.split("<-"))
            src, dst = b, a
        else:
            return None
    except ValueError:
        return None
    if order and 0 <= src < len(order) and 0 <= dst < len(order):
        return order[src], order[dst]
    return src, dst


def _mark_primary(hung: list[HungCollective], groups: dict[str, FrGroup]) -> list[HungCollective]:
    """Primary first, per connected set of ranks (module docstring, step 5)."""
    if not hung:
        return hung
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for item in hung:
        ranks = list(item.pg_ranks) or list(item.entered_ranks + item.missing_ranks)
        for other in ranks[1:]:
            parent[find(other)] = find(ranks[0])
    components: dict[int, list[int]] = defaultdict(list)
    for index, item in enumerate(hung):
        anchor = (item.pg_ranks or item.entered_ranks or item.missing_ranks)[0]
        components[find(anchor)].append(index)
    votes: Counter[int] = Counter()
    for members in components.values():
        firsts: dict[int, tuple[int, int]] = {}
        for index in members:
            item = hung[index]
            group = groups[item.pg_name or ""]
            for rank in item.entered_ranks:
                entry = group.entries.get(rank, {}).get(item.seq or -1)
                if entry is not None and (rank not in firsts or entry.record_id < firsts[rank][0]):
                    firsts[rank] = (entry.record_id, index)
        votes.update(index for _, index in firsts.values())
    primaries = set()
    for members in components.values():
        best = min(
            members,
            key=lambda i: (-votes[i], hung[i].time_created_ns or 0, _numeric(hung[i].pg_name)),
        )
        primaries.add(best)
    marked = [replace(item, primary=i in primaries) for i, item in enumerate(hung)]
    return sorted(marked, key=lambda h: (not h.primary, h.time_created_ns or 0))


def _label(group: FrGroup) -> str:
    return f"PG {group.name} ({group.desc})" if group.desc else f"PG {group.name}"


def _describe(entry: FrEntry) -> str:
    shape = _shape(entry.input_sizes[0]) if entry.input_sizes else "?"
    dtype = entry.input_dtypes[0] if entry.input_dtypes else "?"
    return f"{entry.profiling_name} seq {entry.seq} {shape} {dtype}"


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 12`` or ``ranks 9,14``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in ranks)


def _numeric(name: str | None) -> tuple[int, int | str]:
    text = name or ""
    return (0, int(text)) if text.isascii() and text.isdigit() else (1, text)
