"""The step model's parameters: every value it cannot use names its field."""

from __future__ import annotations

import math

import pytest

from hpcscope.analysis.simulate.step_model import (
    PRE_BARRIER_PHASES,
    STRAGGLER_PHASES,
    SimulationParameterError,
    StepModel,
    Straggler,
)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"backward_seconds": -0.001}, "backward_seconds"),
        ({"data_load_seconds": math.nan}, "data_load_seconds"),
        ({"data_load_seconds": 0.0, "forward_seconds": 0.0, "backward_seconds": 0.0},
         "compute_seconds"),
        ({"jitter_cv": 1.5}, "jitter_cv"),
        ({"jitter_cv": -0.1}, "jitter_cv"),
        ({"jitter_distribution": "cauchy"}, "jitter_distribution"),
        ({"hiccup_probability": 1.01}, "hiccup_probability"),
        ({"hiccup_probability": -0.5}, "hiccup_probability"),
        ({"hiccup_seconds": -1.0}, "hiccup_seconds"),
        ({"gc_interval_steps": -3}, "gc_interval_steps"),
        ({"gc_pause_seconds": -0.01}, "gc_pause_seconds"),
    ],
)  # fmt: skip
def test_bad_model_parameters_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(SimulationParameterError) as info:
        StepModel(**change)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpu": -1}, "straggler_gpu"),
        ({"gpu": 1, "phase": "allreduce"}, "straggler_phase"),
        ({"gpu": 1, "factor": 0.5}, "straggler_factor"),
        ({"gpu": 1, "factor": math.inf}, "straggler_factor"),
    ],
)
def test_bad_stragglers_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SimulationParameterError) as info:
        Straggler(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_phase_lists_are_consistent() -> None:
    assert set(PRE_BARRIER_PHASES) < set(STRAGGLER_PHASES)
    assert "optimizer" in STRAGGLER_PHASES
