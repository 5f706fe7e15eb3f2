"""One point of the simulated scaling curve: :class:`ScalePoint` and how it is estimated.

The Monte Carlo (:mod:`~hpcscope.analysis.simulate.stepsim`) yields, for each GPU count, the
simulated step times and running sums of arrival, barrier wait and hiccups; :func:`scale_point`
turns them into what a user reads: expected step time with percentile bands over steps,
*efficiency* ``ideal / E[step]`` where ideal is the same step without any variability (nominal
phases, the same AllReduce), *scaling efficiency* ``(compute + optimizer) / E[step]``
(communication counted as loss), the barrier-wait share of GPU time, and GPU-hours and money
lost per day.

Estimator: efficiency is ``ideal / mean simulated step``, where ideal uses the nominal compute,
lowered to GPU 0's mean jittered compute over the simulated steps when that is smaller. GPU 0
takes part in every step at every GPU count and every step lasts at least as long as GPU 0's
compute, so the estimate never exceeds 1, not even by Monte Carlo noise at one or two GPUs
where the expected loss is about 0; it equals the nominal ratio whenever GPU 0 ran at or
above its nominal mean (the correction is at most a few standard errors of one GPU's mean,
~0.1 % of the compute at 10,000 steps and CV 10 %). With common random numbers the numerator
does not depend on the GPU count, so efficiency never rises when GPUs are added at the same
AllReduce time. The percentile band is ``nominal ideal / step`` percentiles, capped at 1 (a
step where every GPU ran fast is not more than 100 % efficient).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcscope.analysis.simulate.step_model import FloatArray, StepModel


@dataclass(frozen=True, slots=True)
class ScalePoint:
    """The simulated outcome at one GPU count. Times in seconds, ratios 0-1.

    ``step_seconds_pNN`` are percentiles over the simulated steps; ``efficiency_p05`` is the
    efficiency of a slow (95th percentile) step, ``efficiency_p95`` of a fast (5th) one.
    """

    gpus: int
    steps: int
    step_seconds: float
    step_seconds_p05: float
    step_seconds_p50: float
    step_seconds_p95: float
    step_seconds_p99: float
    ideal_step_seconds: float
    compute_seconds: float
    allreduce_seconds: float
    optimizer_seconds: float
    efficiency: float
    efficiency_p05: float
    efficiency_p95: float
    scaling_efficiency: float
    barrier_wait_seconds: float
    barrier_wait_ratio: float
    hiccup_step_ratio: float
    gpu_hours_per_day: float
    lost_gpu_hours_per_day: float
    lost_cost_per_day: float


def scale_point(
    model: StepModel,
    step_seconds: FloatArray,
    *,
    gpus: int,
    arrival_seconds_sum: float,
    wait_seconds_sum: float,
    hiccup_steps: int,
    gpu0_jitter: FloatArray,
    allreduce_seconds: float,
    optimizer_seconds: float,
    gpu_hour_price: float,
    exposed_seconds: float = 0.0,
) -> ScalePoint:
    """Summarise the simulated steps at one GPU count (the estimator of the module docstring).

    Args:
        model: the step model that was simulated (its nominal phases define the ideal step).
        step_seconds: duration of each simulated step at this GPU count.
        gpus: the GPU count.
        arrival_seconds_sum: pre-barrier arrival times summed over the GPUs and steps.
        wait_seconds_sum: barrier (and optimizer) wait summed over the GPUs and steps.
        hiccup_steps: steps in which at least one of these GPUs had a hiccup.
        gpu0_jitter: GPU 0's jitter factor in each step (1 without jitter).
        allreduce_seconds: the AllReduce time at this GPU count.
        optimizer_seconds: the slowest optimizer step among these GPUs.
        gpu_hour_price: price of one GPU-hour, for ``lost_cost_per_day``.
        exposed_seconds: other communication on the critical path of every step (exposed
            all-to-all, pipeline bubble): part of the ideal step, like the AllReduce.

    Returns:
        The :class:`ScalePoint` of this GPU count.
    """
    steps = step_seconds.shape[0]
    mean = float(step_seconds.mean())
    p05, p50, p95, p99 = (float(v) for v in np.percentile(step_seconds, [5, 50, 95, 99]))
    nominal = model.compute_seconds + model.optimizer_seconds + allreduce_seconds + exposed_seconds
    # Useful work of a step: the nominal compute, except when GPU 0 (in every step at every
    # GPU count) ran faster than nominal on average over these steps; see the module docstring.
    compute_mean = min(model.compute_seconds, model.compute_seconds * float(gpu0_jitter.mean()))
    useful = compute_mean + model.optimizer_seconds
    efficiency = (useful + allreduce_seconds + exposed_seconds) / mean if mean > 0 else 1.0
    band_low = min(1.0, nominal / p95) if p95 > 0 else 1.0
    band_high = min(1.0, nominal / p05) if p05 > 0 else 1.0
    gpu_hours = 24.0 * gpus
    lost = gpu_hours * (1.0 - efficiency)
    return ScalePoint(
        gpus=gpus,
        steps=steps,
        step_seconds=mean,
        step_seconds_p05=p05,
        step_seconds_p50=p50,
        step_seconds_p95=p95,
        step_seconds_p99=p99,
        ideal_step_seconds=nominal,
        compute_seconds=arrival_seconds_sum / (gpus * steps),
        allreduce_seconds=allreduce_seconds,
        optimizer_seconds=optimizer_seconds,
        efficiency=efficiency,
        efficiency_p05=band_low,
        efficiency_p95=band_high,
        scaling_efficiency=useful / mean if mean > 0 else 1.0,
        barrier_wait_seconds=wait_seconds_sum / (gpus * steps),
        barrier_wait_ratio=wait_seconds_sum / (gpus * float(step_seconds.sum()))
        if mean > 0
        else 0.0,
        hiccup_step_ratio=hiccup_steps / steps,
        gpu_hours_per_day=gpu_hours,
        lost_gpu_hours_per_day=lost,
        lost_cost_per_day=lost * gpu_hour_price,
    )
