"""GI signals and rules on fabricated records: each attack trips its rule, honest steps none."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.integrity.rules import evaluate_step, signal_parameters
from hpcscope.analysis.integrity.signals import StepSignals, krum_scores, robust_z, step_signals
from hpcscope.ingest.integrity.records import parse_record
from hpcscope.model.alerts import RuleSpec, Severity, Vector
from hpcscope.model.integrity import IntegrityRecord
from tests.support.integrity_records import gradients, step_lines

RULES = {
    "GI-1": RuleSpec(
        "GI-1", Vector.GRADIENT_INJECTION, Severity.HIGH, "outlier", 10, 3,
        {"norm_z": 6, "cosine_z": 6, "cosine_min": 0.0, "mad_floor_ratio": 0.1,
         "cosine_mad_floor": 0.02},
    ),
    "GI-2": RuleSpec("GI-2", Vector.GRADIENT_INJECTION, Severity.MEDIUM, "krum", 50, 20, {"f": 1}),
    "GI-3": RuleSpec(
        "GI-3", Vector.GRADIENT_INJECTION, Severity.CRITICAL, "liar", 1, 1,
        {"relative_error": 1e-3, "attribution_cosine": 0.9},
    ),
    "GI-4": RuleSpec("GI-4", Vector.GRADIENT_INJECTION, Severity.CRITICAL, "replica", 1, 1, {}),
}  # fmt: skip


def _records(lines: list[str]) -> list[IntegrityRecord]:
    return [parse_record(line, source="f", line_number=i + 1) for i, line in enumerate(lines)]


def _history(
    world: int,
    steps: int,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
    lie: Callable[[np.ndarray], dict[int, np.ndarray]] | None = None,
    checksum: Callable[[IntegrityRecord], IntegrityRecord] | None = None,
    sliced: bool = False,
) -> list[StepSignals]:
    out = []
    params = signal_parameters(RULES)
    for step in range(steps):
        grads = gradients(world, seed=step)
        if transform is not None:
            grads = transform(grads)
        lies = lie(grads) if lie is not None else None
        lines = step_lines(grads, step=step, lie=lies, sliced=sliced)
        records = _records(lines)
        if checksum is not None:
            records = [checksum(r) for r in records]
        out.append(step_signals(records, parameters=params))
    return out


def _fired(history: list[StepSignals]) -> set[tuple[str, int | None]]:
    found = set()
    for i in range(len(history)):
        found |= {(f.rule_id, f.rank) for f in evaluate_step(history[: i + 1], RULES)}
    return found


@pytest.mark.parametrize("sliced", [False, True])
def test_honest_steps_raise_nothing(sliced: bool) -> None:
    history = _history(6, 30, sliced=sliced)
    assert all(s.relative_error is not None and s.relative_error < 1e-9 for s in history)
    assert all(s.reduced_spread is not None and s.reduced_spread < 1e-9 for s in history)
    assert _fired(history) == set()


@pytest.mark.parametrize("world", [3, 4, 7])
def test_a_liar_is_caught_by_sliced_witnesses_at_every_step(world: int) -> None:
    def lie(g: np.ndarray) -> dict[int, np.ndarray]:
        return {1: -g[1]}

    history = _history(world, world, lie=lie, sliced=True)
    for signals in history:  # the liar witnesses two slices at every step: no matter
        error = signals.relative_error
        assert error is not None and error > 0.1
        assert signals.suspect == 1


def test_a_witness_misreporting_what_it_received_shows_as_spread() -> None:
    grads = gradients(4, seed=3)
    lines = step_lines(grads, step=0, sliced=True, witness_lie={2: -grads.mean(axis=0)})
    signals = step_signals(_records(lines))
    assert signals.reduced_spread is not None and signals.reduced_spread > 0.1


def test_a_step_with_a_slice_nobody_witnessed_is_not_checked() -> None:
    grads = gradients(4, seed=3)
    records = _records(step_lines(grads, step=0, sliced=True))
    from dataclasses import replace

    # drop every report of slice 0: no consensus for that slice, so GI-3 cannot be computed
    stripped = [
        replace(
            r,
            buckets=tuple(
                replace(b, reduced=tuple(p for p in b.reduced if p.slice != 0)) for b in r.buckets
            ),
        )
        for r in records
    ]
    assert step_signals(stripped).relative_error is None
    assert step_signals(records).relative_error is not None


def test_scaled_rank_trips_gi1_after_three_steps() -> None:
    def scale(g: np.ndarray) -> np.ndarray:
        g = g.copy()
        g[2] *= 10
        return g

    history = _history(6, 5, transform=scale)
    assert [f.rank for f in evaluate_step(history[:2], RULES)] == []  # 2 of 10: not yet
    assert [(f.rule_id, f.rank) for f in evaluate_step(history[:3], RULES)] == [("GI-1", 2)]


def test_sign_flip_trips_gi1_and_krum_gi2_over_its_window() -> None:
    def flip(g: np.ndarray) -> np.ndarray:
        g = g.copy()
        g[4] = -g[4]
        return g

    history = _history(6, 25, transform=flip)
    assert ("GI-1", 4) in _fired(history)
    assert ("GI-2", 4) in _fired(history)  # 20 of 50 with 25 steps: fires from step 19
    assert all(s.cosine[4] < 0 for s in history)


def test_a_lying_rank_trips_gi3_at_once_and_is_named_as_suspect() -> None:
    def lie(g: np.ndarray) -> dict[int, np.ndarray]:
        return {1: -g[1]}  # it sent g, reports -g

    history = _history(4, 1, lie=lie)
    [finding] = evaluate_step(history, RULES)
    assert (finding.rule_id, finding.rank, finding.suspected) == ("GI-3", 1, True)
    assert finding.values["relative_error"] > 0.1


def test_replica_disagreement_trips_gi4_on_the_minority() -> None:
    def checksum(record: IntegrityRecord) -> IntegrityRecord:
        from dataclasses import replace

        return replace(record, param_checksum="odd" if record.rank == 3 else "same")

    history = _history(4, 1, checksum=checksum)
    assert [(f.rule_id, f.rank) for f in evaluate_step(history, RULES)] == [("GI-4", 3)]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 1000), st.permutations(list(range(5))))
def test_signals_are_invariant_under_rank_permutation(seed: int, order: list[int]) -> None:
    grads = gradients(5, seed=seed)
    grads[1] *= 10
    base = step_signals(_records(step_lines(grads, step=0)))
    permuted = step_signals(_records(step_lines(grads[order], step=0)))
    for new_rank, old_rank in enumerate(order):
        i, j = base.index(old_rank), permuted.index(new_rank)
        assert permuted.norm_z[j] == pytest.approx(base.norm_z[i])
        assert permuted.cosine[j] == pytest.approx(base.cosine[i])


def test_robust_z_floors_the_mad_and_krum_needs_enough_ranks() -> None:
    z = robust_z(np.array([1.0, 1.0, 1.0, 2.0]), mad_floor=0.1)
    assert z[3] == pytest.approx(1.0 / (1.4826 * 0.1))
    assert krum_scores(np.zeros((4, 3)), f=1) is None
    assert krum_scores(np.eye(5), f=1) is not None


def test_a_rank_sending_nan_trips_gi1() -> None:
    def poison(g: np.ndarray) -> np.ndarray:
        g = g.copy()
        g[0, :5] = np.nan
        return g

    history = _history(4, 3, transform=poison)
    [finding] = [f for f in evaluate_step(history, RULES) if f.rule_id == "GI-1"]
    assert finding.rank == 0 and "5 NaN/Inf" in finding.summary
