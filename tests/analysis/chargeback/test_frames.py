"""The columnar attribution equals the per-job reference on arbitrary jobs and GPU rows."""

from __future__ import annotations

import math
from dataclasses import replace

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.chargeback.frames import job_charges
from hpcscope.analysis.chargeback.waste import JobUse, WasteCause, attribute_waste
from hpcscope.analysis.jobs.summary import ExitCause
from tests.analysis.chargeback.test_waste import GPU, job

JOBS = st.lists(
    st.builds(
        lambda gpus, allocated, count, extra, cause: (gpus, allocated, count, extra, cause),
        st.lists(GPU, max_size=10),
        st.one_of(st.none(), st.just(float("nan")), st.floats(0, 1e7)),
        st.one_of(st.none(), st.integers(0, 16)),
        st.floats(0, 1e6),
        st.sampled_from([c.value for c in ExitCause]),
    ),
    max_size=8,
)


def _frames(uses: list[JobUse]) -> tuple[pl.DataFrame, pl.DataFrame]:
    jobs = pl.DataFrame(
        {
            "job_id": [u.job_id for u in uses],
            "gpus_allocated": [u.gpus_allocated for u in uses],
            "allocated_gpu_seconds": [u.allocated_gpu_seconds for u in uses],
            "observed_gpu_seconds": [u.observed_gpu_seconds for u in uses],
            "useful_gpu_seconds": [u.useful_gpu_seconds for u in uses],
            "exit_cause": [u.exit_cause for u in uses],
        },
        schema={
            "job_id": pl.String, "gpus_allocated": pl.Int32, "allocated_gpu_seconds": pl.Float64,
            "observed_gpu_seconds": pl.Float64, "useful_gpu_seconds": pl.Float64,
            "exit_cause": pl.String,
        },
    )  # fmt: skip
    rows = [
        (u.job_id, g.observed_seconds, g.useful_seconds, g.verdict) for u in uses for g in u.gpus
    ]
    gpus = pl.DataFrame(
        rows,
        schema={"job_id": pl.String, "observed_seconds": pl.Float64, "useful_seconds": pl.Float64,
                "verdict": pl.String},
        orient="row",
    )  # fmt: skip
    return jobs, gpus


@settings(max_examples=300, deadline=None)
@given(specs=JOBS)
def test_columnar_equals_the_reference(specs: list[tuple]) -> None:  # type: ignore[type-arg]
    uses = []
    for i, (gpus, allocated, count, extra, cause) in enumerate(specs):
        base = job(gpus, allocated=allocated, count=count, exit_cause=cause)
        uses.append(
            replace(base, job_id=str(i), useful_gpu_seconds=base.useful_gpu_seconds + extra)
        )
    charges = job_charges(*_frames(uses))
    assert set(charges) == {u.job_id for u in uses}
    for use in uses:
        want, got = attribute_waste(use), charges[use.job_id]
        assert math.isclose(got.allocated_gpu_seconds, want.allocated_gpu_seconds, rel_tol=1e-12)
        assert math.isclose(got.useful_gpu_seconds, want.useful_gpu_seconds, rel_tol=1e-12)
        for cause in WasteCause:
            assert math.isclose(
                got.waste_gpu_seconds[cause], want.waste_gpu_seconds[cause],
                rel_tol=1e-9, abs_tol=1e-6,
            ), (cause, use)  # fmt: skip
