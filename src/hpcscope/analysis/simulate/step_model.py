"""The step model of the straggler simulator: one data-parallel training step, as data.

For GPU ``i`` in step ``t`` (``docs/simulate.md`` has the derivation)::

    compute_i(t) = (data_load + forward + backward + other)_i * X_i(t)      # before the barrier
    X_i(t)       ~ LogNormal(mean 1, CV)  (or Normal(1, CV) clipped at 0)
    arrival_i(t) = compute_i(t) + hiccup_i(t) + gc_i(t)
    step(t)      = max_i arrival_i(t) + T_allreduce(n) + max_i optimizer_i
    wait_i(t)    = max_j arrival_j(t) - arrival_i(t)  (+ max_j optimizer_j - optimizer_i)

Each phase mean is multiplied by a persistent straggler factor for the GPUs named in
:class:`Straggler`; hiccups add a fixed delay with probability ``p`` per GPU and step; GC pauses
hit a GPU every ``gc_interval_steps`` steps, at a phase offset that is random per GPU
(``gc_synchronized`` aligns them, as Megatron-LM's manual GC does). ``CV`` is the coefficient
of variation of a GPU's whole pre-barrier compute time in one step (the quantity the order
statistics tables use); the optimizer step is not jittered.

This module holds the parameters only: :class:`StepModel`, :class:`Straggler`, the phase names
and :class:`SimulationParameterError`, which every model of a step raises on a value it cannot
use. They are shared by the Monte Carlo (:mod:`~hpcscope.analysis.simulate.stepsim`), the one-step
player (:mod:`~hpcscope.analysis.simulate.step_timeline`) and the calibration to a measured job
(:mod:`~hpcscope.analysis.simulate.calibration`), none of which needs the others to describe a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from hpcscope.model.errors import InputError

JitterDistribution = Literal["lognormal", "normal"]

#: Phases a GPU runs before it arrives at the barrier of the gradient AllReduce.
PRE_BARRIER_PHASES: tuple[str, ...] = ("data_load", "forward", "backward", "other")
#: Phases a persistent straggler can be slow in.
STRAGGLER_PHASES: tuple[str, ...] = (*PRE_BARRIER_PHASES, "optimizer")

FloatArray = npt.NDArray[np.float64]


class SimulationParameterError(InputError, ValueError):
    """A parameter the model cannot use; ``field`` names it (as in the API and the CLI)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class Straggler:
    """A GPU that is persistently slow in one phase: its phase takes ``factor`` (>= 1) times
    longer than on its peers."""

    gpu: int
    phase: str = "backward"
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.gpu < 0:
            raise SimulationParameterError("straggler_gpu", f"GPU index {self.gpu} is negative")
        if self.phase not in STRAGGLER_PHASES:
            raise SimulationParameterError(
                "straggler_phase",
                f"unknown phase {self.phase!r} (one of {', '.join(STRAGGLER_PHASES)})",
            )
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise SimulationParameterError(
                "straggler_factor",
                f"a straggler is slower than its peers: the factor must be at least 1 "
                f"(got {self.factor})",
            )


def require(condition: bool, name: str, message: str) -> None:
    """Raise :class:`SimulationParameterError` for ``name`` unless ``condition`` holds."""
    if not condition:
        raise SimulationParameterError(name, message)


@dataclass(frozen=True, slots=True)
class StepModel:
    """One data-parallel training step, per GPU, as data. Times in seconds.

    The defaults are the illustrative 42 ms step of the reference (data 2, forward 10,
    backward 20, AllReduce about 6, optimizer 4 ms), without variability.
    """

    data_load_seconds: float = 0.002
    forward_seconds: float = 0.010
    backward_seconds: float = 0.020
    other_seconds: float = 0.0
    optimizer_seconds: float = 0.004
    jitter_cv: float = 0.0
    jitter_distribution: JitterDistribution = "lognormal"
    stragglers: tuple[Straggler, ...] = ()
    hiccup_probability: float = 0.0
    hiccup_seconds: float = 0.0
    gc_interval_steps: int = 0
    gc_pause_seconds: float = 0.0
    gc_synchronized: bool = False

    def __post_init__(self) -> None:
        for name in ("data_load", "forward", "backward", "other", "optimizer"):
            value = getattr(self, f"{name}_seconds")
            require(
                math.isfinite(value) and value >= 0,
                f"{name}_seconds",
                f"must be a non-negative number of seconds (got {value})",
            )
        require(
            self.compute_seconds > 0,
            "compute_seconds",
            "the phases before the barrier add up to zero",
        )
        require(
            math.isfinite(self.jitter_cv) and 0 <= self.jitter_cv <= 1,
            "jitter_cv",
            f"must be between 0 and 1 (got {self.jitter_cv})",
        )
        require(
            self.jitter_distribution in ("lognormal", "normal"),
            "jitter_distribution",
            f"unknown distribution {self.jitter_distribution!r} (lognormal or normal)",
        )
        require(
            math.isfinite(self.hiccup_probability) and 0 <= self.hiccup_probability <= 1,
            "hiccup_probability",
            f"is a probability per GPU and step, between 0 and 1 (got {self.hiccup_probability})",
        )
        require(
            math.isfinite(self.hiccup_seconds) and self.hiccup_seconds >= 0,
            "hiccup_seconds",
            f"must be a non-negative duration (got {self.hiccup_seconds})",
        )
        require(
            self.gc_interval_steps >= 0,
            "gc_interval_steps",
            f"must be 0 (no GC pauses) or a number of steps (got {self.gc_interval_steps})",
        )
        require(
            math.isfinite(self.gc_pause_seconds) and self.gc_pause_seconds >= 0,
            "gc_pause_seconds",
            f"must be a non-negative duration (got {self.gc_pause_seconds})",
        )

    @property
    def compute_seconds(self) -> float:
        """Nominal pre-barrier time of a healthy GPU."""
        return (
            self.data_load_seconds
            + self.forward_seconds
            + self.backward_seconds
            + self.other_seconds
        )

    def phase_seconds(self, phase: str) -> float:
        """Nominal duration of ``phase`` (one of :data:`STRAGGLER_PHASES`)."""
        value: float = getattr(self, f"{phase}_seconds")
        return value

    def factors(self, gpus: int) -> dict[str, FloatArray]:
        """Per-phase slowdown factor of each of the first ``gpus`` GPUs (1 when healthy)."""
        out = {phase: np.ones(gpus) for phase in STRAGGLER_PHASES}
        for straggler in self.stragglers:
            if straggler.gpu < gpus:
                out[straggler.phase][straggler.gpu] *= straggler.factor
        return out

    def per_gpu_seconds(self, gpus: int) -> tuple[FloatArray, FloatArray]:
        """(pre-barrier compute, optimizer) seconds of each GPU before jitter."""
        factors = self.factors(gpus)
        compute = np.zeros(gpus)
        for phase in PRE_BARRIER_PHASES:
            compute += self.phase_seconds(phase) * factors[phase]
        return compute, self.optimizer_seconds * factors["optimizer"]
