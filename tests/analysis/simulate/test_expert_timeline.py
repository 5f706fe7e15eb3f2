"""One MoE step with the all-to-all on a second stream: exact layouts, the hidden/exposed split
checked against the intervals themselves, stragglers holding up their expert group."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.simulate.expert_timeline import ExpertTimeline, expert_step_timeline
from hpcscope.analysis.simulate.step_model import SimulationParameterError, StepModel, Straggler
from hpcscope.analysis.simulate.step_timeline import Segment
from tests.support.plain_intervals import overlap, union

SEEDS = StepModel()  # data 2, forward 10, backward 20, optimizer 4 ms


def layout(
    model: StepModel = SEEDS,
    *,
    gpus: int = 16,
    layers: int = 4,
    group: int = 16,
    comm: float = 0.004,
    overlapped: bool = True,
    allreduce: float = 0.006,
) -> ExpertTimeline:
    return expert_step_timeline(
        model,
        gpus,
        layers=layers,
        group_ranks=group,
        forward_alltoall_seconds=comm,
        backward_alltoall_seconds=comm,
        allreduce_seconds=allreduce,
        gpus_per_node=8,
        overlapped=overlapped,
    )


def _hidden_from_intervals(segments: tuple[Segment, ...], comm: tuple[Segment, ...]) -> float:
    """The truth, from the intervals alone: second-stream time under the GEMMs."""
    gemm_phases = ("forward", "backward")
    gemms = union([(s.start_seconds, s.end_seconds) for s in segments if s.phase in gemm_phases])
    transfers = union([(s.start_seconds, s.end_seconds) for s in comm])
    return overlap(gemms, transfers)


def test_overlapped_step_is_the_longer_of_gemm_and_all_to_all_per_layer() -> None:
    # forward GEMM 2.5 ms per layer < 4 ms all-to-all: 1.5 ms exposed per layer;
    # backward GEMM 5 ms > 4 ms: hidden whole
    tl = layout()
    assert tl.step_seconds == pytest.approx(0.002 + 4 * 0.004 + 4 * 0.005 + 0.006 + 0.004)
    assert tl.alltoall_seconds == pytest.approx(8 * 0.004)
    assert tl.alltoall_exposed_seconds == pytest.approx(4 * 0.0015)
    assert tl.alltoall_hidden_seconds == pytest.approx(8 * 0.004 - 4 * 0.0015)
    assert tl.efficiency == pytest.approx(1.0)
    lane = tl.lanes[5]
    assert [s.phase for s in lane.segments[:3]] == ["data_load", "forward", "alltoall_exposed"]
    assert len(lane.comm_segments) == 8 and {s.phase for s in lane.comm_segments} == {"alltoall"}


def test_without_overlap_the_whole_all_to_all_is_exposed() -> None:
    tl = layout(overlapped=False)
    assert tl.step_seconds == pytest.approx(0.036 + 8 * 0.004 + 0.006)
    assert tl.alltoall_hidden_seconds == 0
    assert tl.alltoall_exposed_seconds == pytest.approx(8 * 0.004)
    assert tl.step_seconds > layout().step_seconds


@settings(max_examples=40, deadline=None)
@given(
    comm=st.floats(min_value=0, max_value=0.02),
    layers=st.integers(min_value=1, max_value=8),
    group=st.sampled_from([1, 2, 4, 8, 16]),
    factor=st.floats(min_value=1, max_value=4),
    phase=st.sampled_from(["forward", "backward", "data_load"]),
    cv=st.floats(min_value=0, max_value=0.2),
    overlapped=st.booleans(),
)
def test_streams_are_consistent_and_the_split_matches_the_intervals(
    comm: float,
    layers: int,
    group: int,
    factor: float,
    phase: str,
    cv: float,
    overlapped: bool,
) -> None:
    model = StepModel(jitter_cv=cv, stragglers=(Straggler(3, phase, factor),))
    tl = layout(model, comm=comm, layers=layers, group=group, overlapped=overlapped)
    for lane in tl.lanes:
        # the compute stream is contiguous from 0 to the end of the step
        clock = 0.0
        for seg in lane.segments:
            assert seg.start_seconds == pytest.approx(clock, abs=1e-12)
            assert seg.end_seconds > seg.start_seconds
            clock = seg.end_seconds
        assert clock == pytest.approx(tl.step_seconds)
        total = 2 * layers * comm
        assert lane.alltoall_hidden_seconds + lane.alltoall_exposed_seconds == pytest.approx(
            total, abs=1e-12
        )
        truth = _hidden_from_intervals(lane.segments, lane.comm_segments)
        assert lane.alltoall_hidden_seconds == pytest.approx(truth, abs=1e-12)
        if not overlapped:
            assert lane.alltoall_hidden_seconds == 0
    assert 0 < tl.efficiency <= 1
    # the slow GPU is never waited for by a GPU outside its expert group, inside the passes
    slow_group = 3 // group
    for lane in tl.lanes:
        waits = [s for s in lane.segments if s.phase == "ep_wait"]
        if lane.group != slow_group and factor > 1 and cv == 0:
            assert not waits


@settings(max_examples=30, deadline=None)
@given(
    comm=st.floats(min_value=0, max_value=0.02),
    layers=st.integers(min_value=1, max_value=8),
    group=st.sampled_from([1, 4, 16]),
)
def test_overlap_never_slows_a_step(comm: float, layers: int, group: int) -> None:
    model = StepModel(jitter_cv=0.05, stragglers=(Straggler(2, "backward", 2.0),))
    on = layout(model, comm=comm, layers=layers, group=group, overlapped=True)
    off = layout(model, comm=comm, layers=layers, group=group, overlapped=False)
    assert on.step_seconds <= off.step_seconds + 1e-12


def test_a_straggler_holds_up_its_expert_group_at_every_layer() -> None:
    """GPU 2's backward GEMMs take 10 ms per layer instead of 5 (all-to-all 1 ms). Its group
    (GPUs 0-7) starts each layer's all-to-all when GPU 2 is ready: from the 3rd backward
    layer on the peers idle 4 ms, then wait 1 ms for an all-to-all that is no longer hidden;
    the other group (GPUs 8-15) waits 20 ms at the AllReduce barrier instead."""
    model = StepModel(stragglers=(Straggler(2, "backward", 2.0),))
    tl = layout(model, group=8, comm=0.001)
    peer, stranger = tl.lanes[5], tl.lanes[12]
    peer_waits = [s for s in peer.segments if s.phase == "ep_wait"]
    assert [s.seconds for s in peer_waits] == pytest.approx([0.004, 0.004])
    assert peer.alltoall_exposed_seconds == pytest.approx(0.003)
    assert not [s for s in stranger.segments if s.phase == "ep_wait"]
    assert stranger.alltoall_exposed_seconds == 0
    assert stranger.wait_seconds == pytest.approx(0.020)
    # both lose the same 20 ms, in different places
    assert peer.wait_seconds + peer.alltoall_exposed_seconds == pytest.approx(0.020)
    assert tl.step_seconds == pytest.approx(0.012 + 4 * 0.010 + 0.006 + 0.004)
    waited = sum(lane.wait_seconds for lane in tl.lanes)
    assert tl.barrier_wait_ratio == pytest.approx(waited / (16 * tl.step_seconds))
    assert waited == pytest.approx(7 * 0.017 + 8 * 0.020)  # 7 peers, 8 in the other group
    assert tl.lanes[2].slowdown_phases == ("backward",)


def test_bad_parameters() -> None:
    with pytest.raises(SimulationParameterError) as info:
        layout(group=5, gpus=4)
    assert info.value.field == "expert_parallel_ranks"
    with pytest.raises(SimulationParameterError) as info:
        layout(layers=0)
    assert info.value.field == "moe_layers"
    with pytest.raises(SimulationParameterError) as info:
        layout(comm=-1.0)
    assert info.value.field == "alltoall_seconds"
