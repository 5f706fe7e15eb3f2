"""Waste attribution: one cause per wasted GPU-second, causes sum to allocated - useful."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.chargeback.waste import (
    FAILED_EXIT_CAUSES,
    IDLE_VERDICT,
    VERDICT_CAUSES,
    GpuUse,
    JobUse,
    WasteCause,
    attribute_waste,
)
from hpcscope.analysis.jobs.efficiency import GpuVerdict
from hpcscope.analysis.jobs.summary import ExitCause

START = datetime(2026, 11, 1)


def job(
    gpus: list[GpuUse],
    *,
    allocated: float | None = 3600.0 * 4,
    count: int | None = 4,
    useful: float | None = None,
    exit_cause: str = "success",
) -> JobUse:
    return JobUse(
        job_id="1",
        user="alice",
        account="vision",
        partition="gpu",
        gpu_model="H100",
        start_time=START,
        end_time=START + timedelta(hours=1),
        gpus_allocated=count,
        allocated_gpu_seconds=allocated,
        observed_gpu_seconds=sum(g.observed_seconds for g in gpus),
        useful_gpu_seconds=sum(g.useful_seconds for g in gpus) if useful is None else useful,
        exit_cause=exit_cause,
        gpus=tuple(gpus),
    )


def test_every_verdict_and_exit_cause_is_placed() -> None:
    assert set(VERDICT_CAUSES) | {IDLE_VERDICT} == {v.value for v in GpuVerdict}
    assert {c.value for c in ExitCause} >= FAILED_EXIT_CAUSES


def test_data_starved_job() -> None:
    gpus = [GpuUse(3600.0, 0.19 * 3600, "busy_not_computing") for _ in range(4)]
    charge = attribute_waste(job(gpus))
    assert charge.allocated_gpu_seconds == 14400.0
    assert math.isclose(charge.useful_gpu_seconds, 4 * 0.19 * 3600)
    assert math.isclose(charge.waste_gpu_seconds[WasteCause.DATA_STARVED], 4 * 0.81 * 3600)
    assert sum(v for c, v in charge.waste_gpu_seconds.items() if c != "data_starved") == 0


def test_idle_gpus_of_a_working_job_are_over_requested() -> None:
    gpus = [GpuUse(3600.0, 3000.0, "healthy"), *(GpuUse(3600.0, 0.0, "idle") for _ in range(3))]
    charge = attribute_waste(job(gpus))
    assert charge.waste_gpu_seconds[WasteCause.OVER_REQUESTED] == 3 * 3600.0
    assert charge.waste_gpu_seconds[WasteCause.LOW_EFFICIENCY] == 600.0
    assert charge.waste_gpu_seconds[WasteCause.IDLE_ALLOCATION] == 0.0


def test_all_idle_is_idle_allocation_and_missing_gpus_unmeasured() -> None:
    gpus = [GpuUse(1800.0, 0.0, "idle"), GpuUse(3600.0, 0.0, "idle")]
    charge = attribute_waste(job(gpus))
    assert charge.waste_gpu_seconds[WasteCause.IDLE_ALLOCATION] == 1800.0 + 3600.0
    # the half hour GPU 0 was not sampled, and the two GPUs without a row
    assert charge.waste_gpu_seconds[WasteCause.UNMEASURED] == 1800.0 + 2 * 3600.0


def test_a_failed_job_charges_everything_not_useful_to_failed_job() -> None:
    gpus = [GpuUse(3600.0, 3000.0, "xid_error"), *(GpuUse(3600.0, 0.0, "idle") for _ in range(3))]
    charge = attribute_waste(job(gpus, exit_cause="node_failure_xid"))
    assert charge.useful_gpu_seconds == 3000.0
    assert charge.waste_gpu_seconds[WasteCause.FAILED_JOB] == 14400.0 - 3000.0


def test_no_allocation_known_charges_observed_time() -> None:
    gpus = [GpuUse(600.0, 300.0, "low_efficiency")]
    charge = attribute_waste(job(gpus, allocated=None, count=None))
    assert charge.allocated_gpu_seconds == 600.0
    assert charge.waste_gpu_seconds[WasteCause.LOW_EFFICIENCY] == 300.0


VERDICTS = st.sampled_from([v.value for v in GpuVerdict] + ["something_new"])
GPU = st.builds(
    lambda observed, ratio, verdict: GpuUse(observed, observed * ratio, verdict),
    st.floats(0, 1e6),
    st.floats(0, 1.5),
    VERDICTS,
)


@settings(max_examples=400, deadline=None)
@given(
    gpus=st.lists(GPU, max_size=12),
    allocated=st.one_of(st.none(), st.floats(0, 1e7)),
    count=st.one_of(st.none(), st.integers(0, 16)),
    extra_useful=st.floats(0, 1e6),
    exit_cause=st.sampled_from([c.value for c in ExitCause]),
)
def test_causes_sum_to_allocated_minus_useful(
    gpus: list[GpuUse],
    allocated: float | None,
    count: int | None,
    extra_useful: float,
    exit_cause: str,
) -> None:
    """Whatever the rows say (over-observed GPUs, more useful than allocated, no rows), each
    wasted GPU-second has exactly one cause: the causes sum to allocated - useful, and none
    is negative."""
    useful = sum(g.useful_seconds for g in gpus) + extra_useful
    charge = attribute_waste(
        job(gpus, allocated=allocated, count=count, useful=useful, exit_cause=exit_cause)
    )
    waste = charge.allocated_gpu_seconds - charge.useful_gpu_seconds
    assert 0.0 <= charge.useful_gpu_seconds <= charge.allocated_gpu_seconds
    assert set(charge.waste_gpu_seconds) == set(WasteCause)
    assert all(v >= 0.0 for v in charge.waste_gpu_seconds.values())
    assert math.isclose(sum(charge.waste_gpu_seconds.values()), waste, rel_tol=1e-9, abs_tol=1e-6)
    if exit_cause in FAILED_EXIT_CAUSES:
        assert charge.waste_gpu_seconds[WasteCause.FAILED_JOB] == waste
