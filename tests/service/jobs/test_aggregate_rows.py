"""An engine's aggregate answer is folded into ``gpu_summary`` rows once, however many pages
read it (the overview reads three answers per call)."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.aggregates import summary_from_aggregates
from hpcscope.model.backends import GPU_AGGREGATE_SCHEMA, JobGpuRead, ReadSource
from hpcscope.service.jobs.reports import gpu_rows

RULES = ReadSource("prometheus", "recording_rules", 60.0)
KEYS = ["job_id", "node", "gpu"]  # the fold's row order is not defined


def _answer() -> pa.Table:
    """Two GPUs of job 7 over ten minutes: one busy, one idle."""
    rows = [
        {
            "job_id": "7",
            "node": "gpu01",
            "gpu": gpu,
            "observed_seconds": 600.0,
            "useful_seconds": 540.0 * busy,
            "reported_util_ratio_sum": 40.0 * busy,
            "reported_util_ratio_count": 40.0,
            "sm_active_ratio_sum": 36.0 * busy,
            "sm_active_ratio_count": 40.0,
        }
        for gpu, busy in ((0, 1.0), (1, 0.0))
    ]
    return pa.Table.from_pylist(rows, schema=GPU_AGGREGATE_SCHEMA)


def test_one_answer_is_folded_once_and_as_summary_from_aggregates_folds_it() -> None:
    answer = _answer()
    first = gpu_rows(JobGpuRead(RULES, aggregates=answer), scrape_interval_seconds=15.0)
    again = gpu_rows(JobGpuRead(RULES, aggregates=answer), scrape_interval_seconds=15.0)
    assert again is first
    frame = pl.from_arrow(answer)
    assert isinstance(frame, pl.DataFrame)
    assert first.sort(KEYS).equals(summary_from_aggregates(frame).sort(KEYS))
    assert first.sort(KEYS)["verdict"].to_list() == ["healthy", "idle"]


def test_another_answer_is_folded_again() -> None:
    answer = _answer()
    first = gpu_rows(JobGpuRead(RULES, aggregates=answer), scrape_interval_seconds=15.0)
    other = gpu_rows(
        JobGpuRead(RULES, aggregates=pa.Table.from_batches(answer.to_batches())),
        scrape_interval_seconds=15.0,
    )
    assert other is not first and other.sort(KEYS).equals(first.sort(KEYS))
