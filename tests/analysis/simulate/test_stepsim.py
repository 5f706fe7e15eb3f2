"""The straggler simulator against independent figures (reference sections 4 and 5), and its
properties (Hypothesis)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.analysis.simulate.collectives import Fabric, allreduce_cost
from hpcscope.analysis.simulate.scale_point import ScalePoint
from hpcscope.analysis.simulate.step_model import (
    STRAGGLER_PHASES,
    SimulationParameterError,
    StepModel,
    Straggler,
)
from hpcscope.analysis.simulate.stepsim import MAX_GPUS, simulate_scaling
from hpcscope.model.nccl_latency import default_nccl_latencies

POWERS = [8, 16, 32, 64, 128, 256, 512, 1024]


def run(
    model: StepModel,
    counts: list[int],
    *,
    allreduce: float | dict[int, float] = 0.0,
    steps: int = 2000,
    seed: int = 0,
    **kwargs: int | float,
) -> dict[int, ScalePoint]:
    seconds = allreduce if isinstance(allreduce, dict) else dict.fromkeys(counts, allreduce)
    points = simulate_scaling(model, counts, seconds, steps=steps, seed=seed, **kwargs)  # type: ignore[arg-type]
    return {p.gpus: p for p in points}


# --------------------------------------------------------------------------------------------
# Validation against independent figures


def test_the_seeds_42_ms_step_with_gpu_2s_backward_doubled() -> None:
    """Seeds: data 2, forward 10, backward 20, AllReduce 6, optimizer 4 = 42 ms; GPU 2's
    backward x2 -> 62 ms, efficiency 42/62 = 67.7 %, the other GPUs wait 20 ms (32 %)."""
    healthy = StepModel()
    assert healthy.compute_seconds + healthy.optimizer_seconds + 0.006 == pytest.approx(0.042)
    slow = dataclasses.replace(healthy, stragglers=(Straggler(2, "backward", 2.0),))
    point = run(slow, [16], allreduce=0.006, steps=50)[16]
    assert point.step_seconds == pytest.approx(0.062, abs=1e-12)
    assert point.ideal_step_seconds == pytest.approx(0.042, abs=1e-12)
    assert point.efficiency == pytest.approx(42 / 62, abs=1e-9)
    assert round(point.efficiency, 2) == 0.68
    # 15 GPUs wait 20 ms each, the straggler none: 300 GPU-ms of 16 x 62
    assert point.barrier_wait_seconds == pytest.approx(15 * 0.020 / 16, abs=1e-12)
    assert point.barrier_wait_ratio == pytest.approx(15 * 0.020 / (16 * 0.062), abs=1e-9)
    assert 0.020 / point.step_seconds == pytest.approx(0.32, abs=0.005)  # a waiting GPU's share
    # GPU-hours lost per day: 16 GPUs x 24 h x (1 - 42/62)
    assert point.lost_gpu_hours_per_day == pytest.approx(16 * 24 * 20 / 62, rel=1e-9)
    # and without the straggler nothing is lost
    clean = run(healthy, [16], allreduce=0.006, steps=50)[16]
    assert clean.step_seconds == pytest.approx(0.042, abs=1e-12)
    assert clean.efficiency == pytest.approx(1.0, abs=1e-12)
    assert clean.barrier_wait_ratio == pytest.approx(0.0, abs=1e-12)


# E[max of n standard normals], reference section 4 (quadrature): 1.42 at 8, 2.34 at 64,
# 2.83 at 256, 3.25 at 1024 in the issue.
E_MAX_Z = {8: 1.424, 64: 2.344, 256: 2.827, 1024: 3.248}


def test_jitter_only_matches_expected_max_of_normals_within_2_percent() -> None:
    cv, compute, steps = 0.05, 0.032, 20_000
    model = StepModel(
        data_load_seconds=0.0,
        forward_seconds=0.0,
        backward_seconds=compute,
        optimizer_seconds=0.0,
        jitter_cv=cv,
        jitter_distribution="normal",
    )
    points = run(model, sorted(E_MAX_Z), steps=steps, seed=11)
    for gpus, expected in E_MAX_Z.items():
        measured = (points[gpus].step_seconds - compute) / (compute * cv)
        assert measured == pytest.approx(expected, rel=0.02), gpus


# Lognormal jitter, E[max C] / mu, reference section 4.
LOGNORMAL = {0.10: {8: 1.149, 64: 1.258, 256: 1.320, 1024: 1.377},
             0.20: {8: 1.31, 64: 1.57, 256: 1.72, 1024: 1.87}}  # fmt: skip


@pytest.mark.parametrize("cv", sorted(LOGNORMAL))
def test_lognormal_expected_max_table(cv: float) -> None:
    model = StepModel(0.0, 0.0, 0.032, optimizer_seconds=0.0, jitter_cv=cv)
    points = run(model, sorted(LOGNORMAL[cv]), steps=20_000, seed=5)
    digits = 3 if cv == 0.10 else 2
    for gpus, expected in LOGNORMAL[cv].items():
        ratio = points[gpus].step_seconds / 0.032
        assert ratio == pytest.approx(expected, abs=0.6 * 10**-digits + 0.002), gpus


# Efficiency with normal jitter, comm excluded, C = 32 ms, T_opt = 4 ms (reference section 5).
JITTER_TABLE = {
    0.02: [97.5, 97.0, 96.5, 96.0, 95.6, 95.2, 94.9, 94.5],
    0.05: [94.0, 92.7, 91.6, 90.6, 89.7, 88.8, 88.1, 87.4],
    0.10: [88.8, 86.4, 84.5, 82.8, 81.3, 79.9, 78.7, 77.6],
}


@pytest.mark.parametrize("cv", sorted(JITTER_TABLE))
def test_jitter_efficiency_table(cv: float) -> None:
    model = StepModel(0.0, 0.0, 0.032, optimizer_seconds=0.004, jitter_cv=cv,
                      jitter_distribution="normal")  # fmt: skip
    points = run(model, POWERS, steps=10_000, seed=3)
    for gpus, expected_percent in zip(POWERS, JITTER_TABLE[cv], strict=True):
        assert points[gpus].efficiency * 100 == pytest.approx(expected_percent, abs=0.2), gpus


def test_monte_carlo_with_hiccups_matches_the_reference() -> None:
    """Lognormal CV 5 % plus 20 ms hiccups at p = 1e-3: 93.6 % (8) -> ~88 % (64) -> ~81 %
    (256) -> ~70 % (1024), +-0.3 between seeds; P(step delayed) = 1 - (1 - p)^n."""
    model = StepModel(0.0, 0.0, 0.032, optimizer_seconds=0.004, jitter_cv=0.05,
                      hiccup_probability=1e-3, hiccup_seconds=0.020)  # fmt: skip
    steps = 10_000
    points = run(model, [8, 64, 256, 1024], steps=steps, seed=2)
    expected = {8: (93.6, 0.3), 64: (88.0, 1.0), 256: (81.0, 1.0), 1024: (70.0, 1.0)}
    for gpus, (percent, tolerance) in expected.items():
        assert points[gpus].efficiency * 100 == pytest.approx(percent, abs=tolerance), gpus
        p_delayed = 1 - (1 - 1e-3) ** gpus
        standard_error = math.sqrt(p_delayed * (1 - p_delayed) / steps)
        assert points[gpus].hiccup_step_ratio == pytest.approx(p_delayed, abs=4 * standard_error)
    # the reference's rounded figures: 0.8 %, 6 %, 23 %, 64 % of steps delayed
    assert [round(points[n].hiccup_step_ratio, 2) for n in (64, 256, 1024)] == [0.06, 0.23, 0.64]


def test_persistent_straggler_sets_the_step_whatever_the_scale() -> None:
    """A rank slower by k: E[step] ~ mu * k whatever n (reference section 4)."""
    slow = tuple(Straggler(5, phase, 2.0) for phase in ("data_load", "forward", "backward"))
    model = StepModel(jitter_cv=0.02, optimizer_seconds=0.0, stragglers=slow)
    points = run(model, [8, 64, 1024], steps=2000, seed=4)
    for point in points.values():
        assert point.step_seconds == pytest.approx(2 * 0.032, rel=0.01)


def test_scaling_efficiency_with_the_two_level_sum_form() -> None:
    """Weak scaling, CV 5 %, two-level AllReduce (sum form): 81 % (8) -> 70 % (64) ->
    67 % (1024), reference section 5."""
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    latencies = default_nccl_latencies()
    counts = [8, 64, 1024]
    allreduce = {
        n: allreduce_cost(1.27e9, n, fabric, latencies, algorithm="two-level-sum").seconds
        for n in counts
    }
    model = StepModel(0.0, 0.0, 0.032, optimizer_seconds=0.004, jitter_cv=0.05)
    points = run(model, counts, allreduce=allreduce, steps=5000, seed=8)
    for gpus, percent in {8: 81, 64: 70, 1024: 67}.items():
        assert points[gpus].scaling_efficiency * 100 == pytest.approx(percent, abs=1.5), gpus


def test_gc_pauses_unsynchronised_hit_every_step_at_scale() -> None:
    base = StepModel(jitter_cv=0.0, gc_interval_steps=100, gc_pause_seconds=0.050)
    unsync = run(base, [1, 1024], allreduce=0.006, steps=3000, seed=1)
    sync = run(dataclasses.replace(base, gc_synchronized=True), [1, 1024], allreduce=0.006,
               steps=3000, seed=1)  # fmt: skip
    # one GPU pays 1 step in 100 either way: +0.5 ms on average
    for points in (unsync, sync):
        assert points[1].step_seconds == pytest.approx(0.042 + 0.0005, rel=1e-9)
    # 1024 unsynchronised GPUs: P(no GPU collects in a step) = (1 - 1/100)^1024 ~ 3e-5
    assert unsync[1024].step_seconds == pytest.approx(0.042 + 0.050, rel=0.01)
    assert sync[1024].step_seconds == pytest.approx(0.042 + 0.0005, rel=1e-9)
    assert sync[1024].efficiency > 0.98 > 0.5 > unsync[1024].efficiency


def test_large_scale_and_memory_bounded_chunks_give_identical_results() -> None:
    model = StepModel(jitter_cv=0.05, hiccup_probability=0.01, hiccup_seconds=0.01,
                      gc_interval_steps=7, gc_pause_seconds=0.003,
                      stragglers=(Straggler(70, "forward", 1.5),))  # fmt: skip
    counts = [8, 100, 300]
    small = run(model, counts, steps=300, seed=9, chunk_cells=1000)
    large = run(model, counts, steps=300, seed=9)
    for gpus in counts:
        a, b = dataclasses.asdict(small[gpus]), dataclasses.asdict(large[gpus])
        assert a == pytest.approx(b, rel=1e-12)


def test_common_random_numbers_a_gpu_count_does_not_depend_on_the_others() -> None:
    model = StepModel(jitter_cv=0.05, hiccup_probability=0.01, hiccup_seconds=0.01)
    alone = run(model, [64], steps=400, seed=6)[64]
    among = run(model, [8, 64, 1000], steps=400, seed=6)[64]
    assert dataclasses.asdict(alone) == pytest.approx(dataclasses.asdict(among), rel=1e-12)
    other_seed = run(model, [64], steps=400, seed=7)[64]
    assert other_seed.step_seconds != alone.step_seconds


def test_sixteen_thousand_gpus() -> None:
    model = StepModel(jitter_cv=0.05)
    point = run(model, [MAX_GPUS], steps=20, seed=1)[MAX_GPUS]
    # E[max of 16,384 lognormals, CV 5 %] ~ exp(0.05 * 3.971) -> 1.22 x 32 ms
    assert point.step_seconds == pytest.approx(0.032 * 1.22 + 0.004, rel=0.02)


# --------------------------------------------------------------------------------------------
# Parameters


@pytest.mark.parametrize(
    ("counts", "steps", "allreduce", "extra", "field"),
    [
        ([0], 10, {0: 0.0}, {}, "gpus"),
        ([MAX_GPUS + 1], 10, {MAX_GPUS + 1: 0.0}, {}, "gpus"),
        ([], 10, {}, {}, "gpus"),
        ([8], 0, {8: 0.0}, {}, "steps"),
        ([8], 10, {}, {}, "allreduce_seconds"),
        ([8], 10, {8: -1.0}, {}, "allreduce_seconds"),
        ([8], 10, {8: 0.0}, {"seed": -1}, "seed"),
        ([8], 10, {8: 0.0}, {"gpu_hour_price": -2.5}, "gpu_hour_price"),
    ],
)
def test_bad_run_parameters_name_the_field(
    counts: list[int], steps: int, allreduce: dict[int, float], extra: dict[str, float], field: str
) -> None:
    with pytest.raises(SimulationParameterError) as info:
        simulate_scaling(StepModel(), counts, allreduce, steps=steps, **extra)  # type: ignore[arg-type]
    assert info.value.field == field


# --------------------------------------------------------------------------------------------
# Properties

stragglers = st.lists(
    st.builds(
        Straggler,
        gpu=st.integers(0, 40),
        phase=st.sampled_from(STRAGGLER_PHASES),
        factor=st.floats(1.0, 5.0),
    ),
    max_size=4,
).map(tuple)

models = st.builds(
    StepModel,
    data_load_seconds=st.floats(0.0, 0.01),
    forward_seconds=st.floats(0.0, 0.05),
    backward_seconds=st.floats(1e-4, 0.05),
    other_seconds=st.floats(0.0, 0.005),
    optimizer_seconds=st.floats(0.0, 0.01),
    jitter_cv=st.floats(0.0, 0.5),
    jitter_distribution=st.sampled_from(["lognormal", "normal"]),
    stragglers=stragglers,
    hiccup_probability=st.floats(0.0, 1.0),
    hiccup_seconds=st.floats(0.0, 0.05),
    gc_interval_steps=st.integers(0, 12),
    gc_pause_seconds=st.floats(0.0, 0.02),
    gc_synchronized=st.booleans(),
)
counts_strategy = st.lists(st.integers(1, 96), min_size=1, max_size=6, unique=True)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(model=models, counts=counts_strategy, steps=st.integers(1, 40), seed=st.integers(0, 2**32),
       allreduce=st.floats(0.0, 0.02))  # fmt: skip
def test_efficiency_is_never_above_one(
    model: StepModel, counts: list[int], steps: int, seed: int, allreduce: float
) -> None:
    for point in run(model, counts, allreduce=allreduce, steps=steps, seed=seed).values():
        assert 0 < point.efficiency <= 1 + 1e-12
        assert 0 < point.scaling_efficiency <= point.efficiency + 1e-12
        assert point.efficiency_p05 <= point.efficiency_p95 <= 1 + 1e-12
        assert 0 <= point.barrier_wait_ratio < 1
        assert point.step_seconds_p05 <= point.step_seconds_p50 <= point.step_seconds_p95
        assert point.lost_gpu_hours_per_day >= -1e-9


@FAST
@given(model=models, counts=counts_strategy, steps=st.integers(1, 40), seed=st.integers(0, 2**32),
       allreduce=st.floats(0.0, 0.02))  # fmt: skip
def test_efficiency_never_rises_with_more_gpus(
    model: StepModel, counts: list[int], steps: int, seed: int, allreduce: float
) -> None:
    """Same per-GPU variability, same AllReduce: more GPUs can only wait for more."""
    points = run(model, counts, allreduce=allreduce, steps=steps, seed=seed)
    ordered = [points[n] for n in sorted(points)]
    for smaller, larger in itertools.pairwise(ordered):
        assert larger.step_seconds >= smaller.step_seconds - 1e-12
        assert larger.efficiency <= smaller.efficiency + 1e-12
        assert larger.scaling_efficiency <= smaller.scaling_efficiency + 1e-12


@FAST
@given(
    model=models.map(
        lambda m: dataclasses.replace(
            m, jitter_cv=0.0, hiccup_probability=0.0, gc_synchronized=True
        )
    ),
    gpus=st.integers(41, 80),
    permutation_seed=st.integers(0, 2**32),
    allreduce=st.floats(0.0, 0.02),
)
def test_results_do_not_depend_on_which_gpu_is_which(
    model: StepModel, gpus: int, permutation_seed: int, allreduce: float
) -> None:
    """Relabel the GPUs (stragglers move with their labels): nothing changes."""
    permutation = np.random.default_rng(permutation_seed).permutation(gpus)
    moved = dataclasses.replace(
        model,
        stragglers=tuple(
            Straggler(int(permutation[s.gpu]), s.phase, s.factor)
            for s in reversed(model.stragglers)
        ),
    )
    before = run(model, [gpus], allreduce=allreduce, steps=5)[gpus]
    after = run(moved, [gpus], allreduce=allreduce, steps=5)[gpus]
    assert dataclasses.asdict(after) == pytest.approx(dataclasses.asdict(before), rel=1e-12)


def test_where_the_straggler_sits_does_not_matter_with_jitter() -> None:
    """With random jitter and hiccups, moving the straggler changes the draws it meets but not
    the expected outcome: the same within Monte Carlo error."""
    base = StepModel(jitter_cv=0.05, hiccup_probability=1e-3, hiccup_seconds=0.02)
    results = [
        run(dataclasses.replace(base, stragglers=(Straggler(gpu, "backward", 1.5),)), [1024],
            steps=3000, seed=12)[1024]
        for gpu in (0, 2, 517, 1023)
    ]  # fmt: skip
    for point in results[1:]:
        assert point.step_seconds == pytest.approx(results[0].step_seconds, rel=0.005)
        assert point.barrier_wait_ratio == pytest.approx(results[0].barrier_wait_ratio, rel=0.02)
