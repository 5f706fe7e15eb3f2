"""Calibrating the step model from a measured job (the ``traces analyze`` contract)."""

from __future__ import annotations

import pytest

from hpcscope.analysis.simulate.calibration import (
    MeasuredJob,
    MeasuredStraggler,
    calibrate,
    expected_max_standard_normal,
)
from hpcscope.analysis.simulate.step_model import SimulationParameterError
from hpcscope.service.simulate.measured_job import load_measured_job
from tests.support.paths import FIXTURES

HERE = FIXTURES / "simulate"

# Reference section 4: E[max Z] by quadrature.
PUBLISHED = {2: 0.564, 8: 1.424, 16: 1.766, 32: 2.070, 64: 2.344, 128: 2.595, 256: 2.827,
             512: 3.044, 1024: 3.248, 4096: 3.626, 16384: 3.971}  # fmt: skip


@pytest.mark.parametrize("n", sorted(PUBLISHED))
def test_expected_max_of_normals_matches_the_published_table(n: int) -> None:
    assert expected_max_standard_normal(n) == pytest.approx(PUBLISHED[n], abs=6e-4)


def test_expected_max_of_one_is_zero() -> None:
    assert expected_max_standard_normal(1) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(SimulationParameterError):
        expected_max_standard_normal(0)


def test_calibrates_the_straggler_job() -> None:
    job = load_measured_job(HERE / "traces_analyze_straggler.json")
    cal = calibrate(job)
    model = cal.model
    assert cal.gpus == 8
    assert model.backward_seconds == pytest.approx(0.0201, rel=0.01)  # peer median
    assert model.forward_seconds == pytest.approx(0.0101, rel=0.01)
    assert model.other_seconds == pytest.approx(0.0003, rel=0.02)
    assert cal.communication_seconds == pytest.approx(0.0061, rel=0.01)
    [straggler] = model.stragglers
    assert (straggler.gpu, straggler.phase) == (2, "backward")
    assert straggler.factor == pytest.approx(2.0, rel=0.01)
    assert cal.fixed_model.stragglers == ()
    # a persistent straggler hides the jitter: the default CV is used, and said so
    assert cal.jitter_cv_source == "default"
    assert any("persistent straggler" in note for note in cal.notes)
    # the model reproduces the measured step at the measured scale
    assert cal.actual_step_seconds is not None
    assert cal.modelled_step_seconds == pytest.approx(cal.actual_step_seconds, rel=0.01)


def test_estimates_jitter_from_the_per_step_excess() -> None:
    job = load_measured_job(HERE / "traces_analyze_healthy.json")
    cal = calibrate(job)
    assert cal.jitter_cv_source == "per_step"
    # the fixture's per-step excess was drawn with CV 3 % of a 32.6 ms compute (60 steps)
    assert cal.model.jitter_cv == pytest.approx(0.03, rel=0.2)
    assert calibrate(job, jitter_cv=0.07).model.jitter_cv == 0.07
    assert calibrate(job, jitter_cv=0.07).jitter_cv_source == "given"


def test_rejects_inconsistent_jobs() -> None:
    phases = {0: {"backward": 0.02}, 1: {"backward": 0.02}}
    with pytest.raises(SimulationParameterError) as info:
        calibrate(MeasuredJob(ranks=(), steps=1, phases={}))
    assert info.value.field == "ranks"
    with pytest.raises(SimulationParameterError) as info:
        calibrate(MeasuredJob(ranks=(0, 1, 2), steps=1, phases=phases))
    assert info.value.field == "phases" and "2" in info.value.message
    with pytest.raises(SimulationParameterError) as info:
        calibrate(
            MeasuredJob(ranks=(0, 1), steps=1, phases=phases,
                        stragglers=(MeasuredStraggler(5, "backward", 0.01),))
        )  # fmt: skip
    assert info.value.field == "stragglers"
    with pytest.raises(SimulationParameterError) as info:
        calibrate(MeasuredJob(ranks=(0,), steps=1, phases={0: {"backward": 0.0}}))
    assert info.value.field == "compute_seconds"


def test_straggler_in_communication_is_noted_not_modelled() -> None:
    phases = {r: {"backward": 0.02, "communication": 0.006} for r in range(4)}
    job = MeasuredJob(
        ranks=(0, 1, 2, 3), steps=5, phases=phases,
        stragglers=(MeasuredStraggler(1, "communication", 0.004),),
    )  # fmt: skip
    cal = calibrate(job)
    assert cal.model.stragglers == ()
    assert any("communication" in note for note in cal.notes)
