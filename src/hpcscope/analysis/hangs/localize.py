"""Localise a hung collective from watchdog lines and flight-recorder dumps (pure).

NCCL prints no timeout of its own: a hang surfaces through PyTorch's watchdog (every rank that
waits too long prints the collective it waits in) or through IB retry errors. Flight-recorder
dumps say more: every dumped rank's per-group counters and its unfinished collectives. The
method for each source is in :mod:`hpcscope.analysis.hangs.flight_recorder` and
:mod:`hpcscope.analysis.hangs.watchdog`; this module joins them into one verdict, ranks the
culprits and writes the one-line summary.

Culprits, strongest evidence first:

- ``never_entered`` (high): peers wait in a collective the rank never enqueued;
- ``silent`` (high): the rank printed no watchdog line while its group's peers timed out;
- ``completion_stalled`` (medium): peers saw collectives complete that this rank enqueued but
  never saw complete (its GPU or watchdog is stuck);
- ``desynced`` (medium): the rank waits in a different collective than its group;
- ``assumed_silent`` (low): printed nothing, but the world size is only assumed.

Only collectives are compared across ranks; point-to-point pairs are context (a peer that has
not posted its receive is usually blocked elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hpcscope.analysis.hangs.flight_recorder import FrFindings, analyse_dumps, collect_groups
from hpcscope.analysis.hangs.types import (
    Culprit,
    Evidence,
    HangReport,
    HungCollective,
    Verdict,
)
from hpcscope.analysis.hangs.watchdog import WdFindings, analyse_watchdog
from hpcscope.model.collectives import FlightRecorderDump, WatchdogEvent

_KINDS = {
    "never_entered": (0, "high"),
    "silent": (1, "high"),
    "completion_stalled": (2, "medium"),
    "desynced": (3, "medium"),
    "assumed_silent": (4, "low"),
}


def localize_hang(
    *,
    watchdog: Sequence[WatchdogEvent] = (),
    dumps: Sequence[FlightRecorderDump] = (),
    world_size: int | None = None,
    world_size_source: str | None = None,
) -> HangReport:
    """Say which collective hung, which ranks are missing from it, and who is to blame.

    Args:
        watchdog: ``ProcessGroupNCCL`` events from any number of ranks' logs.
        dumps: flight-recorder dumps, one per rank (a dump without a rank is ignored).
        world_size: number of ranks in the job when known (``--world-size``, NCCL's
            ``nranks``); the default group's members are ``0..world_size-1``.
        world_size_source: where ``world_size`` came from, echoed in the report.

    Returns:
        A :class:`~hpcscope.analysis.hangs.types.HangReport`; primary hung collectives first,
        culprits strongest first.
    """
    groups = collect_groups(dumps)
    fr = analyse_dumps(groups)
    if world_size is None:
        default = [g for g in groups.values() if g.desc == "default_pg" and g.ranks]
        if default:
            world_size, world_size_source = len(default[0].ranks), "flight_recorder"
    members = {name: g.order or tuple(sorted(g.ranks)) for name, g in groups.items() if g.ranks}
    wd = analyse_watchdog(watchdog, world_size=world_size, pg_members=members)
    culprits = _culprits(fr, wd)
    hung = _order_hung(fr, wd)
    dumped = tuple(sorted({d.rank for d in dumps if d.rank is not None}))
    verdict = _verdict(fr, wd, hung, dumped)
    notes = _notes(dumps, wd)
    return HangReport(
        verdict=verdict,
        summary=_summary(verdict, hung, fr, wd, culprits, dumped),
        hung=tuple(hung),
        desyncs=tuple(wd.desyncs),
        queue_depths=tuple(sorted(fr.queue_depths + wd.queue_depths, key=lambda q: q.rank)),
        culprits=culprits,
        p2p_unmatched=tuple(fr.p2p_unmatched),
        world_size=world_size,
        world_size_source=world_size_source if world_size is not None else None,
        ranks_with_dumps=dumped,
        ranks_with_timeouts=tuple(sorted(wd.reporting_ranks)),
        notes=notes,
    )


def _culprits(fr: FrFindings, wd: WdFindings) -> tuple[Culprit, ...]:
    reasons: dict[int, dict[str, list[str]]] = {}
    for source in (fr.evidence, wd.evidence):
        for (rank, kind), texts in source.items():
            reasons.setdefault(rank, {}).setdefault(kind, []).extend(texts)
    for rank, text in wd.assumed_silent:
        if rank not in reasons:
            reasons.setdefault(rank, {}).setdefault("assumed_silent", []).append(text)
    culprits = []
    for rank, kinds in reasons.items():
        kind = min(kinds, key=lambda k: _KINDS[k][0])
        ordered = sorted(kinds, key=lambda k: _KINDS[k][0])
        culprits.append(
            Culprit(rank, kind, _KINDS[kind][1], tuple(t for k in ordered for t in kinds[k]))
        )
    culprits.sort(key=lambda c: (_KINDS[c.kind][0], -len(c.reasons), c.rank))
    return tuple(culprits)


def _order_hung(fr: FrFindings, wd: WdFindings) -> list[HungCollective]:
    """Flight-recorder collectives (already primary-first), then watchdog ones.

    Watchdog collectives are primary when no dump localised anything.
    """
    hung = list(fr.hung) or list(fr.stuck_everywhere)
    if not any(h.primary for h in hung) and wd.hung:
        # Without dumps nothing orders one group's timeout before another's: each group's
        # stuck collective is primary, those with silent members first.
        ordered = sorted(wd.hung, key=lambda h: (not h.missing_ranks, -len(h.entered_ranks)))
        hung.extend(replace(h, primary=True) for h in ordered)
    else:
        hung.extend(wd.hung)
    return hung


def _verdict(
    fr: FrFindings, wd: WdFindings, hung: list[HungCollective], dumped: tuple[int, ...]
) -> Verdict:
    if any(h.missing_ranks for h in hung):
        return Verdict.HANG_LOCALIZED
    if wd.desyncs:
        return Verdict.DESYNC
    if wd.timeouts or hung:
        return Verdict.TIMEOUT_UNLOCALIZED
    if dumped and fr.comparable_groups == 0 and fr.queue_depths:
        return Verdict.INSUFFICIENT_DATA
    if any(q.depth > 0 for q in wd.queue_depths):
        return Verdict.TIMEOUT_UNLOCALIZED
    return Verdict.NO_HANG


def _summary(
    verdict: Verdict,
    hung: list[HungCollective],
    fr: FrFindings,
    wd: WdFindings,
    culprits: tuple[Culprit, ...],
    dumped: tuple[int, ...],
) -> str:
    blame = [str(c.rank) for c in culprits if c.confidence != "low"]
    tail = f" Likely culprits: ranks {','.join(blame)}." if blame else ""
    if verdict is Verdict.HANG_LOCALIZED:
        parts = [_describe(h) for h in hung if h.primary and h.missing_ranks]
        if not parts:
            parts = [_describe(h) for h in hung if h.missing_ranks][:1]
        return "Hang: " + "; ".join(parts) + "." + tail
    if verdict is Verdict.DESYNC:
        texts = []
        for desync in wd.desyncs:
            where = ", ".join(
                f"{_ranks(p.ranks)} in {p.op or '?'} SeqNum {p.seq}" for p in desync.positions
            )
            texts.append(f"{desync.pg}: {where}")
        return "Desync: " + "; ".join(texts) + "." + tail
    if verdict is Verdict.TIMEOUT_UNLOCALIZED:
        shown = [h for h in hung if h.primary]
        text = "Timeout: " + "; ".join(_describe(h) for h in shown[:4])
        text += f" (and {len(shown) - 4} more groups)." if len(shown) > 4 else "."
        assumed = sorted({r for r, _ in wd.assumed_silent})
        if assumed:
            text += (
                f" {_ranks(assumed).capitalize()} printed nothing, but the world size is unknown "
                "(give --world-size to confirm)."
            )
        else:
            text += " No rank is known to be missing."
        if not fr.hung and fr.stuck_everywhere:
            text += (
                " Every member entered it: it is stuck inside NCCL (network or GPU) or behind "
                "another group's collective; look for IB errors and Xids."
            )
        return text + tail
    if verdict is Verdict.INSUFFICIENT_DATA:
        deepest = max(fr.queue_depths, key=lambda q: q.depth)
        oldest = f" (oldest {deepest.oldest_pending})" if deepest.oldest_pending else ""
        return (
            f"Only {_ranks(dumped)} dumped: rank {deepest.rank} has {deepest.depth} "
            f"collectives enqueued but not completed in {deepest.pg}{oldest}. Dumps of its "
            "peers are needed to tell which ranks are missing."
        )
    return "No watchdog timeout and no collective stuck in the inputs."


def _describe(h: HungCollective) -> str:
    group = f"PG {h.pg_name}" if h.pg_name else "group"
    if h.pg_desc:
        group += f" ({h.pg_desc})"
    what = " ".join(p for p in (h.op, f"seq {h.seq}" if h.seq is not None else None) if p)
    shape = " ".join(p for p in (h.size, h.dtype) if p)
    if shape and h.evidence is Evidence.WATCHDOG:
        shape = f"({shape})"
    text = f"{group} {what}" + (f" {shape}" if shape else "")
    text += f": {_ranks(h.entered_ranks)} entered"
    if h.missing_ranks:
        text += f", {_ranks(h.missing_ranks)} never did"
    return text


def _notes(dumps: Sequence[FlightRecorderDump], wd: WdFindings) -> tuple[str, ...]:
    notes = []
    unranked = [d.source for d in dumps if d.rank is None]
    if unranked:
        notes.append(
            "dumps without a rank (no 'rank' key, no number ending the file name) were "
            f"ignored: {', '.join(unranked)}"
        )
    ranks = [d.rank for d in dumps if d.rank is not None]
    repeated = sorted({r for r in ranks if ranks.count(r) > 1})
    if repeated:
        notes.append(
            f"several dumps for ranks {','.join(map(str, repeated))} (dumps of different runs "
            "mixed?): the last file read for a rank wins"
        )
    statuses = [s for d in dumps for s in d.pg_status]
    if statuses and all(s.last_started < 0 for s in statuses):
        notes.append(
            "start times were not recorded (TORCH_NCCL_ENABLE_TIMING unset): 'scheduled' "
            "entries may have started on the GPU"
        )
    if any(s.name_inferred for s in statuses):
        notes.append("some groups' names were inferred from creation order (no entries)")
    if wd.group_local_only:
        notes.append(
            "no line printed a global [rankN] prefix (torch 1.x): ranks are group-local; in "
            "the default group they equal global ranks"
        )
    return tuple(notes)


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 12`` or ``ranks 9,14``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in ranks)
