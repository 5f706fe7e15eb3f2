from datetime import datetime

import polars as pl

from hpcscope.analysis.jobs.queue import queue_waits


def test_both_queue_waits() -> None:
    jobs = pl.DataFrame(
        {
            "job_id": ["held", "plain", "pending", "clock-skew"],
            "submit_time": [datetime(2026, 1, 1, 0, 0, 0)] * 4,
            "eligible_time": [
                datetime(2026, 1, 1, 0, 10, 0),
                datetime(2026, 1, 1, 0, 0, 0),
                None,
                datetime(2026, 1, 1, 0, 0, 0),
            ],
            "start_time": [
                datetime(2026, 1, 1, 0, 12, 0),
                datetime(2026, 1, 1, 0, 0, 30),
                None,
                datetime(2025, 12, 31, 23, 59, 59),
            ],
        }
    )
    out = queue_waits(jobs)
    assert out["queue_wait_seconds"].to_list() == [720.0, 30.0, None, 0.0]
    assert out["eligible_wait_seconds"].to_list() == [120.0, 30.0, None, 0.0]
