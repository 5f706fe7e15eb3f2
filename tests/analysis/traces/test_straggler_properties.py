"""Hypothesis properties of the straggler analysis on synthetic phase tables."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.phases import PhaseTable
from hpcscope.analysis.traces.rank_timeline import PHASES
from hpcscope.analysis.traces.stragglers import straggler_report


def _table(busy: np.ndarray, slow: int | None, extra: float, phase: int) -> PhaseTable:
    n_ranks, n_steps = busy.shape
    seconds = np.zeros((n_ranks, n_steps, len(PHASES)))
    seconds[:, :, PHASES.index("backward")] = busy
    if slow is not None:
        seconds[slow, :, phase] += extra
    total = seconds.sum(axis=2)
    step = total.max(axis=0)
    seconds[:, :, PHASES.index("barrier_wait")] += step - total
    return PhaseTable(
        tuple(range(n_ranks)),
        tuple(range(n_steps)),
        seconds,
        seconds.sum(axis=2),
        0,
        0,
        None,
        (),
        False,
    )


cases = st.tuples(
    st.integers(3, 8),
    st.integers(2, 6),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["data_load", "forward", "backward", "optimizer"]),
)


@settings(max_examples=60, deadline=None)
@given(cases)
def test_exactly_the_injected_rank_is_flagged(case: tuple[int, int, int, str]) -> None:
    n_ranks, n_steps, seed, phase = case
    rng = np.random.default_rng(seed)
    busy = 0.02 * (1 + 0.03 * rng.standard_normal((n_ranks, n_steps)))
    slow = int(rng.integers(n_ranks))
    report = straggler_report(_table(busy, slow, 0.03, PHASES.index(phase)))
    assert [(s.rank, s.phase) for s in report.stragglers] == [(slow, phase)]
    assert report.stragglers[0].excess_seconds_per_step > 0.025


@settings(max_examples=60, deadline=None)
@given(cases, st.floats(0.01, 100))
def test_scores_invariant_under_permutation_and_scaling(
    case: tuple[int, int, int, str], scale: float
) -> None:
    n_ranks, n_steps, seed, phase = case
    rng = np.random.default_rng(seed)
    busy = 0.02 * (1 + 0.05 * rng.standard_normal((n_ranks, n_steps)))
    table = _table(busy, 0, 0.01, PHASES.index(phase))
    base = straggler_report(table)
    perm = rng.permutation(n_ranks)
    permuted = PhaseTable(
        table.ranks,
        table.steps,
        table.seconds[perm] * scale,
        table.step_seconds[perm] * scale,
        0,
        0,
        None,
        (),
        False,
    )
    other = straggler_report(permuted)
    for new, old in enumerate(perm):
        assert (
            other.scores[new] == np.float64(base.scores[int(old)])
            or abs(other.scores[new] - base.scores[int(old)]) < 1e-9
        )
    assert abs(other.what_if.slowdown - base.what_if.slowdown) < 1e-9


def test_no_straggler_when_ranks_are_equal() -> None:
    busy = np.full((4, 3), 0.02)
    report = straggler_report(_table(busy, None, 0.0, 0))
    assert report.stragglers == ()
    assert report.what_if.slowdown == 1.0


@settings(max_examples=60, deadline=None)
@given(cases, st.floats(1.5, 4.0))
def test_one_noisy_step_is_not_a_straggler(case: tuple[int, int, int, str], factor: float) -> None:
    # A hiccup (one rank much slower in one step) is machine noise, not a straggler.
    n_ranks, n_steps, seed, phase = case
    rng = np.random.default_rng(seed)
    busy = 0.02 * (1 + 0.02 * rng.standard_normal((n_ranks, max(n_steps, 3))))
    busy[int(rng.integers(n_ranks)), int(rng.integers(busy.shape[1]))] *= factor
    report = straggler_report(_table(busy, None, 0.0, PHASES.index(phase)))
    assert report.stragglers == ()


@settings(max_examples=60, deadline=None)
@given(cases, st.floats(0.0, 0.01))
def test_a_rank_that_starts_its_step_early_is_not_blamed(
    case: tuple[int, int, int, str], head_start: float
) -> None:
    # A rank whose step window opens earlier than its peers' waits longer at the first
    # collective: its window is longer, but the others never wait for it, and it does not make
    # a healthy peer look slow. Head starts up to half a step (param's 8-rank DLRM: rank 1
    # waits 5 ms more than the median rank in a 10 ms busy step).
    n_ranks, n_steps, seed, phase = case
    rng = np.random.default_rng(seed)
    busy = 0.02 * (1 + 0.02 * rng.standard_normal((n_ranks, n_steps)))
    slow = int(rng.integers(n_ranks))
    table = _table(busy, slow, 0.01, PHASES.index(phase))
    early = (slow + 1) % n_ranks
    seconds = table.seconds.copy()
    seconds[early, :, PHASES.index("barrier_wait")] += head_start
    shifted = PhaseTable(
        table.ranks, table.steps, seconds, seconds.sum(axis=2), 0, 0, None, (), False
    )
    report = straggler_report(shifted)
    assert [s.rank for s in report.stragglers] == [slow]
    assert report.what_if.worst_rank == slow


@settings(max_examples=60, deadline=None)
@given(cases, st.floats(0.012, 0.03))
def test_the_rank_the_others_wait_for_is_the_straggler(
    case: tuple[int, int, int, str], late: float
) -> None:
    # A rank that begins the step late: its own window is no longer than anyone's, but every
    # peer waits `late` seconds for it at the first collective (param's 8-rank DLRM, rank 7).
    n_ranks, n_steps, seed, phase = case
    rng = np.random.default_rng(seed)
    busy = 0.02 * (1 + 0.02 * rng.standard_normal((n_ranks, n_steps)))
    table = _table(busy, None, 0.0, PHASES.index(phase))
    slow = int(rng.integers(n_ranks))
    seconds = table.seconds.copy()
    others = [r for r in range(n_ranks) if r != slow]
    seconds[others, :, PHASES.index("barrier_wait")] += late
    shifted = PhaseTable(
        table.ranks, table.steps, seconds, seconds.sum(axis=2), 0, 0, None, (), False
    )
    report = straggler_report(shifted)
    assert [s.rank for s in report.stragglers] == [slow]
    assert report.stragglers[0].excess_seconds_per_step == pytest.approx(late, abs=0.003)
