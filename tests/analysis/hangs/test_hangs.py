"""Hang localisation against NVRx's labelled fault-injection cases and real watchdog logs."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.hangs.localize import localize_hang
from hpcscope.analysis.hangs.types import HangReport, Verdict
from hpcscope.ingest.nccl.flight_recorder import read_flight_recorder
from hpcscope.ingest.nccl.logs import read_nccl_log
from hpcscope.model.collectives import (
    FlightRecorderDump,
    FrEntry,
    PgConfig,
    PgStatus,
    WatchdogEvent,
)
from tests.ingest.nccl.nccl_fixtures import CASES, FR_CASES, NCCL, case_dumps


@dataclass(frozen=True)
class ReferenceRow:
    pgid: str
    desc: str
    op: str
    size: str
    dtype: str
    missing: tuple[int, ...]


def _reference(case: str) -> list[ReferenceRow]:
    """NVRx's expected CollectiveAnalyzer table (``desc,window`` -> desc)."""
    rows = []
    for line in (FR_CASES / case / "reference_output.txt").read_text().splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 6:
            missing = tuple(int(r) for r in cells[5].split(",") if r)
            desc = cells[1].rsplit(",", 1)[0]
            rows.append(ReferenceRow(cells[0], desc, cells[2], cells[3], cells[4], missing))
    return rows


def _fault_ranks(case: str) -> set[int]:
    text = (FR_CASES / case / "fault_injection.log").read_text()
    match = re.search(r"Fault ranks: \[([\d, ]+)\]", text)
    assert match is not None
    return {int(r) for r in match.group(1).split(",")}


def _case_report(case: str) -> HangReport:
    return localize_hang(dumps=[read_flight_recorder(p) for p in case_dumps(case)])


def test_reference_tables_match_the_shared_pool_copy() -> None:
    """The per-case reference files agree with the concatenated reference in the pool."""
    pool = (NCCL / "nvrx_flight_recorder_attribution_reference.log").read_text()
    for case in CASES:
        for row in _reference(case):
            assert f"{row.pgid}     | {row.desc}," in pool
            assert re.search(rf"\| {','.join(map(str, row.missing))}\s*$", pool, re.M)


@pytest.mark.parametrize("case", CASES)
def test_primary_hung_collectives_match_nvrx(case: str) -> None:
    report = _case_report(case)
    assert report.verdict is Verdict.HANG_LOCALIZED
    primaries = [h for h in report.hung if h.primary]
    got = {(h.pg_name, h.pg_desc, h.op, h.size, h.dtype, h.missing_ranks) for h in primaries}
    want = {(r.pgid, r.desc, r.op, r.size, r.dtype, r.missing) for r in _reference(case)}
    assert got == want
    assert report.world_size == 16 and report.world_size_source == "flight_recorder"
    assert report.ranks_with_dumps == tuple(range(16))


@pytest.mark.parametrize("case", CASES)
def test_culprits_are_exactly_the_injected_fault_ranks(case: str) -> None:
    """NVRx names 12 alone for gpu_error_1st; rank 14's stalled completions name it too."""
    report = _case_report(case)
    assert {c.rank for c in report.culprits} == _fault_ranks(case)
    assert all(c.confidence in ("high", "medium") for c in report.culprits)


def test_gpu_error_completion_stall_evidence() -> None:
    report = _case_report("gpu_error_1st")
    by_rank = {c.rank: c for c in report.culprits}
    assert by_rank[12].kind == "never_entered"
    assert by_rank[14].kind == "completion_stalled"
    assert any("PG 74" in r and "seq 20536" in r for r in by_rank[14].reasons)
    primary = report.hung[0]
    assert primary.primary and primary.seq == 20537 and primary.entered_ranks == (13, 14, 15)
    assert dict(primary.sizes_by_rank) == {13: "4027x5120", 14: "4007x5120", 15: "4251x5120"}
    assert report.summary.startswith(
        "Hang: PG 74 (EXPERT_MODEL_PARALLEL_GROUP) nccl:all_to_all seq 20537 4027x5120 "
        "BFloat16: ranks 13,14,15 entered, rank 12 never did."
    )


def test_independent_hangs_each_get_a_primary() -> None:
    report = _case_report("lock_gil_2nd")
    primaries = [(h.pg_name, h.missing_ranks) for h in report.hung if h.primary]
    assert primaries == [("73", (10,)), ("74", (15,))]


def test_point_to_point_groups_are_context_not_evidence() -> None:
    report = _case_report("lock_gil_1st")
    assert report.p2p_unmatched
    assert all(h.op is None or "send" not in h.op for h in report.hung)
    assert {c.rank for c in report.culprits} == {9, 14}


def test_the_single_committed_dump_cannot_name_missing_ranks() -> None:
    report = localize_hang(
        dumps=[read_flight_recorder(NCCL / "pytorch_flight_recorder_dump_rank12.json")]
    )
    assert report.verdict is Verdict.INSUFFICIENT_DATA
    assert report.culprits == () and report.hung == ()
    deepest = max(report.queue_depths, key=lambda q: q.depth)
    assert (deepest.rank, deepest.pg, deepest.depth) == (
        12,
        "PG 41 (TENSOR_MODEL_PARALLEL_GROUP)",
        12,
    )
    assert deepest.oldest_pending == "nccl:_all_gather_base seq 42806 4096x1x5120 BFloat16"
    assert "Dumps of its peers are needed" in report.summary


def _events(*names: str) -> list[WatchdogEvent]:
    return [e for name in names for e in read_nccl_log(NCCL / name).watchdog]


def test_desync_in_mixed_optypes() -> None:
    report = localize_hang(
        watchdog=_events("pytorch_watchdog_mixed_optypes_broadcast_allgather.log")
    )
    assert report.verdict is Verdict.DESYNC
    (desync,) = report.desyncs
    assert [(p.seq, p.op, p.ranks) for p in desync.positions] == [
        (532339, "BROADCAST", (1, 2)),
        (532341, "_ALLGATHER_BASE", (0,)),
    ]
    assert [(c.rank, c.kind) for c in report.culprits] == [(0, "desynced")]


def test_legacy_timeouts_name_silent_ranks_only_with_a_world_size() -> None:
    events = _events("pytorch_watchdog_timeout_legacy_format.log")
    unknown = localize_hang(watchdog=events)
    assert unknown.verdict is Verdict.TIMEOUT_UNLOCALIZED
    assert [(c.rank, c.confidence) for c in unknown.culprits] == [
        (0, "low"),
        (4, "low"),
        (5, "low"),
    ]
    assert "--world-size" in unknown.summary
    assert any("group-local" in n for n in unknown.notes)
    known = localize_hang(watchdog=events, world_size=8, world_size_source="given")
    assert known.verdict is Verdict.HANG_LOCALIZED
    assert known.hung[0].missing_ranks == (0, 4, 5)
    assert [(c.rank, c.kind, c.confidence) for c in known.culprits] == [
        (0, "silent", "high"),
        (4, "silent", "high"),
        (5, "silent", "high"),
    ]


def test_torch26_default_group_queue_depths() -> None:
    report = localize_hang(
        watchdog=_events("pytorch_watchdog_timeout_allreduce_default_pg_torch2.6.log")
    )
    assert report.verdict is Verdict.TIMEOUT_UNLOCALIZED
    assert report.hung[0].entered_ranks == (0, 1, 2) and report.hung[0].seq == 808
    assert [(q.rank, q.depth) for q in report.queue_depths] == [(0, 4), (1, 4)]


def test_watchdog_line_without_group_inherits_it() -> None:
    report = localize_hang(watchdog=_events("pytorch_watchdog_timeout_allreduce_torch2.5.log"))
    groups = {(h.pg_name, h.op, h.seq, h.entered_ranks) for h in report.hung}
    assert groups == {(None, "ALLREDUCE", 1580, (0, 3, 4))}
    assert report.desyncs == () and report.verdict is Verdict.TIMEOUT_UNLOCALIZED


def test_sub_group_timeouts_stay_in_their_groups() -> None:
    report = localize_hang(
        watchdog=_events("pytorch_watchdog_timeout_alltoall_with_nccl_socket_trace.log"),
        world_size=16,
    )
    by_group = {h.pg_name: (h.op, h.seq, h.entered_ranks) for h in report.hung}
    assert by_group == {"119": ("ALLTOALL_BASE", 216, (13,)), "112": ("ALLREDUCE", 57, (15,))}
    assert report.culprits == ()


def test_no_input_is_no_hang() -> None:
    report = localize_hang()
    assert report.verdict is Verdict.NO_HANG and report.hung == ()


# ------------------------------------------------------------------ synthetic properties


def _dump(rank: int, members: tuple[int, ...], enqueued: int, completed: int) -> FlightRecorderDump:
    entries = tuple(
        FrEntry(
            record_id=seq,
            pg_local_id=3,
            pg_name="9",
            pg_desc="DATA_PARALLEL",
            collective_seq_id=seq,
            p2p_seq_id=0,
            op_id=seq,
            profiling_name="nccl:all_reduce",
            is_p2p=False,
            state="scheduled",
            time_created_ns=1_000 + seq,
            time_started_ns=None,
            time_completed_ns=None,
            input_sizes=((1024,),),
            input_dtypes=("Float",),
            output_sizes=((1024,),),
            output_dtypes=("Float",),
            timeout_seconds=600.0,
            duration_seconds=None,
            retired=False,
            thread_name="pt_main_thread",
        )
        for seq in range(completed + 1, enqueued + 1)
    )
    return FlightRecorderDump(
        source=f"_dump_{rank}",
        rank=rank,
        version="2.9",
        nccl_version="2.27.3",
        pg_configs=(PgConfig("9", "DATA_PARALLEL", members),),
        pg_status=(PgStatus("3", "9", False, enqueued, -1, completed),),
        entries=entries,
        warnings=(),
    )


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(2, 16),
    base=st.integers(0, 10_000),
    ahead=st.integers(1, 5),
    data=st.data(),
)
def test_missing_ranks_are_exactly_the_ones_that_stopped(
    size: int, base: int, ahead: int, data: st.DataObject
) -> None:
    """Ranks that stop enqueuing while peers run ahead are named, whatever the dump order."""
    members = tuple(range(size))
    stopped = data.draw(st.sets(st.sampled_from(members), min_size=1, max_size=size - 1))
    dumps = [_dump(r, members, base if r in stopped else base + ahead, base) for r in members]
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(dumps)
    report = localize_hang(dumps=dumps)
    assert report.verdict is Verdict.HANG_LOCALIZED
    (hung,) = report.hung
    assert hung.missing_ranks == tuple(sorted(stopped))
    assert hung.seq == base + 1 and hung.op == "nccl:all_reduce" and hung.size == "1024"
    assert {c.rank for c in report.culprits} == stopped


def test_collective_every_member_entered_is_stuck_inside_nccl() -> None:
    """All ranks enqueued seq 11..12 and none saw 11 complete: no missing rank, not a no-hang."""
    members = (0, 1, 2, 3)
    report = localize_hang(dumps=[_dump(r, members, 12, 10) for r in members])
    assert report.verdict is Verdict.TIMEOUT_UNLOCALIZED
    (hung,) = report.hung
    assert (hung.seq, hung.entered_ranks, hung.missing_ranks, hung.primary) == (
        11,
        members,
        (),
        True,
    )
    assert "stuck inside NCCL" in report.summary and report.culprits == ()
    healthy = localize_hang(dumps=[_dump(r, members, 12, 12) for r in members])
    assert healthy.verdict is Verdict.NO_HANG


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), case=st.sampled_from(CASES))
def test_input_order_does_not_change_the_verdict(seed: int, case: str) -> None:
    dumps = [read_flight_recorder(p) for p in case_dumps(case)]
    reference = localize_hang(dumps=dumps)
    random.Random(seed).shuffle(dumps)
    shuffled = localize_hang(dumps=dumps)
    assert shuffled.verdict == reference.verdict
    assert shuffled.hung == reference.hung
    assert [c.rank for c in shuffled.culprits] == [c.rank for c in reference.culprits]
