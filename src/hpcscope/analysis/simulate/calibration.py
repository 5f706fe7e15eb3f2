"""Calibrate the step model from a measured job, for the what-if curve at larger scale.

Input: the per-rank phase means of one job as ``hpcscope traces analyze --json`` reports them
(``phases[rank][phase]`` in seconds per step, the flagged ``stragglers``, and, when present,
the per-step excess of the slowest rank over the peer median). Output: a
:class:`~hpcscope.analysis.simulate.step_model.StepModel` whose healthy phases are the peer medians,
whose persistent stragglers are the flagged ranks with their measured slowdown factor
(``rank's phase / peer median``), and whose jitter CV comes from the per-step excess when the
run has no persistent straggler: the slowest of ``n`` ranks exceeds the median by
``sigma * E[max of n standard normals]`` on average, so ``CV = mean excess / E[max] / compute``.

The measured collective time (``communication``, the part of the collective after the last
rank arrived) anchors the AllReduce model:
:func:`hpcscope.analysis.simulate.collectives.message_bytes_for` finds the gradient size that makes
the model take that long at the measured rank count, and the same model then gives the time at every
larger count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from hpcscope.analysis.simulate.step_model import (
    STRAGGLER_PHASES,
    SimulationParameterError,
    StepModel,
    Straggler,
)

#: Phase names of the traces contract (issue 3) that the step model uses.
MEASURED_PHASES: tuple[str, ...] = (*STRAGGLER_PHASES, "communication", "barrier_wait")


@dataclass(frozen=True, slots=True)
class MeasuredStraggler:
    """A rank the trace analysis flagged, and the phase that makes it slow."""

    rank: int
    phase: str
    excess_seconds_per_step: float
    score: float | None = None


@dataclass(frozen=True, slots=True)
class MeasuredJob:
    """What the trace analysis measured (seconds per step, means over the profiled steps).

    Attributes:
        ranks: the ranks traced (global ranks, ``0..n-1`` in a complete run).
        steps: profiled steps.
        phases: ``phases[rank][phase]``; phases absent for a rank count as 0.
        stragglers: flagged ranks (may be empty).
        step_excess_seconds: per step, the slowest rank's excess over the peer median
            (empty when the analysis did not report it).
        actual_step_seconds: measured mean step time, if reported.
    """

    ranks: tuple[int, ...]
    steps: int
    phases: Mapping[int, Mapping[str, float]]
    stragglers: tuple[MeasuredStraggler, ...] = ()
    step_excess_seconds: tuple[float, ...] = ()
    actual_step_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Calibration:
    """A step model fitted to a measured job.

    Attributes:
        model: the job as measured (stragglers kept).
        fixed_model: the same job with its stragglers fixed.
        gpus: ranks of the measured job.
        communication_seconds: measured collective time (peer median), seconds per step.
        jitter_cv_source: ``per_step`` (estimated), ``given`` or ``default``.
        modelled_step_seconds: the model's step time at the measured scale without jitter
            (compare with ``actual_step_seconds``).
        notes: what the calibration assumed, for the user.
    """

    model: StepModel
    fixed_model: StepModel
    gpus: int
    communication_seconds: float
    jitter_cv_source: str
    modelled_step_seconds: float
    actual_step_seconds: float | None
    notes: tuple[str, ...]


def expected_max_standard_normal(n: int) -> float:
    """``E[max of n independent standard normals]`` by quadrature (0 for n = 1).

    ``∫ x · n φ(x) Φ(x)^(n-1) dx`` on a fine grid over [-12, 12]; accurate to ~1e-6.
    """
    if n < 1:
        raise SimulationParameterError("gpus", "must be at least 1")
    x = np.linspace(-12.0, 12.0, 24001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    integrand = x * n * pdf * cdf ** (n - 1)
    return float(np.trapezoid(integrand, x))


def calibrate(
    job: MeasuredJob,
    *,
    jitter_cv: float | None = None,
    default_jitter_cv: float = 0.02,
) -> Calibration:
    """Fit a :class:`StepModel` to a measured job.

    Args:
        job: the measurement.
        jitter_cv: use this CV instead of estimating it.
        default_jitter_cv: CV used when it cannot be estimated (persistent stragglers hide the
            jitter; no per-step excess reported).

    Raises:
        SimulationParameterError: an empty job, a straggler rank without phases, or phase
            times that are negative or add up to zero.
    """
    if not job.ranks:
        raise SimulationParameterError("ranks", "the measured job has no ranks")
    missing = [r for r in job.ranks if r not in job.phases]
    if missing:
        raise SimulationParameterError(
            "phases", f"no phase times for rank(s) {', '.join(map(str, missing[:5]))}"
        )
    position = {rank: i for i, rank in enumerate(sorted(job.ranks))}

    def median(phase: str) -> float:
        return statistics.median(float(job.phases[r].get(phase, 0.0)) for r in job.ranks)

    medians = {phase: median(phase) for phase in MEASURED_PHASES}
    for phase, value in medians.items():
        if not (math.isfinite(value) and value >= 0):
            raise SimulationParameterError("phases", f"{phase}: not a duration ({value})")
    notes: list[str] = []
    stragglers: list[Straggler] = []
    for flagged in job.stragglers:
        if flagged.rank not in position:
            raise SimulationParameterError(
                "stragglers", f"rank {flagged.rank} is flagged but was not traced"
            )
        slow_phase = flagged.phase
        if slow_phase not in STRAGGLER_PHASES:
            notes.append(
                f"rank {flagged.rank}: slow in {flagged.phase!r}, which the step model does not "
                "scale per GPU; left out of the persistent stragglers"
            )
            continue
        base = medians[slow_phase]
        slow = float(job.phases[flagged.rank].get(slow_phase, 0.0))
        if base <= 0:
            notes.append(f"rank {flagged.rank}: peer median of {slow_phase} is 0; cannot scale it")
            continue
        factor = max(1.0, slow / base)
        stragglers.append(Straggler(gpu=position[flagged.rank], phase=slow_phase, factor=factor))
    healthy = StepModel(
        data_load_seconds=medians["data_load"],
        forward_seconds=medians["forward"],
        backward_seconds=medians["backward"],
        other_seconds=medians["other"],
        optimizer_seconds=medians["optimizer"],
    )
    source = "given"
    cv = jitter_cv
    if cv is None:
        cv, source = _estimate_cv(job, healthy.compute_seconds, default_jitter_cv, notes)
    fixed = replace(healthy, jitter_cv=cv)
    model = replace(fixed, stragglers=tuple(stragglers))
    compute, optimizer = model.per_gpu_seconds(len(job.ranks))
    modelled = float(compute.max()) + medians["communication"] + float(optimizer.max())
    return Calibration(
        model=model,
        fixed_model=fixed,
        gpus=len(job.ranks),
        communication_seconds=medians["communication"],
        jitter_cv_source=source,
        modelled_step_seconds=modelled,
        actual_step_seconds=job.actual_step_seconds,
        notes=tuple(notes),
    )


def _estimate_cv(
    job: MeasuredJob, compute_seconds: float, default: float, notes: list[str]
) -> tuple[float, str]:
    n = len(job.ranks)
    if job.stragglers:
        notes.append(
            f"jitter CV {default:.3f} assumed: a persistent straggler is the slowest rank in "
            "every step, so the per-step spread says nothing about random jitter"
        )
        return default, "default"
    if not job.step_excess_seconds or n < 2:
        notes.append(f"jitter CV {default:.3f} assumed: no per-step spread in the input")
        return default, "default"
    excess = statistics.fmean(job.step_excess_seconds)
    sigma = excess / expected_max_standard_normal(n)
    cv = min(1.0, max(0.0, sigma / compute_seconds))
    notes.append(
        f"jitter CV {cv:.4f} from the slowest rank's mean excess over the median "
        f"({excess * 1e3:.3f} ms over {len(job.step_excess_seconds)} steps, {n} ranks)"
    )
    return cv, "per_step"
