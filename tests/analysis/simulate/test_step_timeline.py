"""One step GPU by GPU, and the ring AllReduce schedule the player animates."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.simulate.step_model import SimulationParameterError, StepModel, Straggler
from hpcscope.analysis.simulate.step_timeline import MAX_TIMELINE_GPUS, ring_schedule, step_timeline


@given(gpus=st.integers(1, 40), per_node=st.integers(1, 9), seed=st.integers(0, 2**32))
def test_ring_schedule_really_sums_the_buffers(gpus: int, per_node: int, seed: int) -> None:
    """Run the transfers on real numbers: every rank must end with the sum of all buffers."""
    rng = np.random.default_rng(seed)
    buffers = rng.integers(-1000, 1000, size=(gpus, gpus)).astype(float)  # rank x chunk
    expected = buffers.sum(axis=0)
    held = buffers.copy()
    schedule = ring_schedule(gpus, per_node)
    assert schedule.steps == 2 * (gpus - 1)
    for step in range(schedule.steps):
        moves = [t for t in schedule.transfers if t.step == step]
        assert len(moves) == gpus  # every rank sends exactly one chunk per step
        assert sorted(t.source for t in moves) == list(range(gpus))
        sent = {(t.target, t.chunk): held[t.source, t.chunk] for t in moves}
        for (target, chunk), value in sent.items():
            if step < gpus - 1:
                held[target, chunk] += value  # reduce-scatter: accumulate
            else:
                held[target, chunk] = value  # all-gather: overwrite with the full sum
    np.testing.assert_allclose(held, np.broadcast_to(expected, held.shape))


def test_ring_hops_inside_and_between_nodes() -> None:
    schedule = ring_schedule(16, 8)
    links = {(h.source, h.target): h.link for h in schedule.hops}
    assert links[(7, 8)] == "network" and links[(15, 0)] == "network"
    assert sum(1 for link in links.values() if link == "network") == 2
    assert links[(0, 1)] == "nvlink" and links[(8, 9)] == "nvlink"
    assert all(h.link == "nvlink" for h in ring_schedule(8, 8).hops)
    assert ring_schedule(1, 8).hops == ()


def test_the_seeds_step_gpu_by_gpu() -> None:
    model = StepModel(stragglers=(Straggler(2, "backward", 2.0),))
    timeline = step_timeline(model, 16, allreduce_seconds=0.006, gpus_per_node=8)
    assert timeline.step_seconds == pytest.approx(0.062)
    assert timeline.barrier_seconds == pytest.approx(0.052)
    assert timeline.efficiency == pytest.approx(42 / 62)
    for lane in timeline.lanes:
        # contiguous segments from 0 to the end of the step
        assert lane.segments[0].start_seconds == 0
        assert lane.segments[-1].end_seconds == pytest.approx(timeline.step_seconds)
        for a, b in zip(lane.segments, lane.segments[1:], strict=False):
            assert a.end_seconds == pytest.approx(b.start_seconds)
        phases = [s.phase for s in lane.segments]
        if lane.gpu == 2:
            assert lane.slowdown_phases == ("backward",)
            assert lane.wait_seconds == pytest.approx(0.0)
            assert phases == ["data_load", "forward", "backward", "allreduce", "optimizer"]
            backward = next(s for s in lane.segments if s.phase == "backward")
            assert backward.seconds == pytest.approx(0.040)
        else:
            assert lane.wait_seconds == pytest.approx(0.020)  # the other GPUs wait 20 ms
            assert phases == [
                "data_load", "forward", "backward", "barrier_wait", "allreduce", "optimizer",
            ]  # fmt: skip
    assert (timeline.lanes[9].node, timeline.lanes[9].local_index) == (1, 1)
    assert timeline.barrier_wait_ratio == pytest.approx(15 * 0.020 / (16 * 0.062))


def test_jitter_and_hiccups_in_one_step_are_seeded() -> None:
    model = StepModel(jitter_cv=0.05, hiccup_probability=0.5, hiccup_seconds=0.003)
    a = step_timeline(model, 16, allreduce_seconds=0.006, gpus_per_node=8, seed=4)
    b = step_timeline(model, 16, allreduce_seconds=0.006, gpus_per_node=8, seed=4)
    c = step_timeline(model, 16, allreduce_seconds=0.006, gpus_per_node=8, seed=5)
    assert a == b and a != c
    assert any(s.phase == "hiccup" for lane in a.lanes for s in lane.segments)
    assert a.barrier_seconds == pytest.approx(max(lane.arrival_seconds for lane in a.lanes))
    assert 0 < a.efficiency <= 1


def test_slow_optimizer_leaves_the_others_idle() -> None:
    model = StepModel(stragglers=(Straggler(1, "optimizer", 3.0),))
    timeline = step_timeline(model, 4, allreduce_seconds=0.001, gpus_per_node=8)
    assert timeline.step_seconds == pytest.approx(0.032 + 0.001 + 0.012)
    assert [s.phase for s in timeline.lanes[0].segments][-1] == "idle"
    assert timeline.lanes[0].wait_seconds == pytest.approx(0.008)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": MAX_TIMELINE_GPUS + 1}, "gpus"),
        ({"allreduce_seconds": -1.0}, "allreduce_seconds"),
        ({"seed": -2}, "seed"),
    ],
)
def test_bad_parameters(kwargs: dict[str, float], field: str) -> None:
    values = {"gpus": 16, "allreduce_seconds": 0.006, "gpus_per_node": 8, "seed": 0, **kwargs}
    with pytest.raises(SimulationParameterError) as info:
        step_timeline(StepModel(), **values)  # type: ignore[arg-type]
    assert info.value.field == field
    with pytest.raises(SimulationParameterError):
        ring_schedule(4, 0)


def test_timeline_matches_the_simulator_without_variability() -> None:
    from hpcscope.analysis.simulate.stepsim import simulate_scaling

    model = StepModel(stragglers=(Straggler(3, "forward", 1.7), Straggler(5, "data_load", 3.0)))
    timeline = step_timeline(model, 8, allreduce_seconds=0.005, gpus_per_node=8)
    point = simulate_scaling(model, [8], {8: 0.005}, steps=3)[0]
    assert timeline.step_seconds == pytest.approx(point.step_seconds)
    assert timeline.barrier_wait_ratio == pytest.approx(point.barrier_wait_ratio)
    assert timeline.efficiency == pytest.approx(point.efficiency)
    assert dataclasses.replace(model, stragglers=()).compute_seconds == pytest.approx(0.032)
