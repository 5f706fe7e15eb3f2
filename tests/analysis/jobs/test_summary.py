"""Exit causes of finished jobs, in the terms of the successful-jobs SLO."""

from __future__ import annotations

import pytest

from hpcscope.analysis.jobs.summary import ExitCause, exit_cause


@pytest.mark.parametrize(
    ("state", "code", "xid", "expected"),
    [
        ("COMPLETED", 0, None, ExitCause.SUCCESS),
        ("COMPLETED", 2, None, ExitCause.USER_ERROR),  # sacct COMPLETED with a non-zero code
        ("FAILED", 1, None, ExitCause.USER_ERROR),
        ("OUT_OF_MEMORY", 0, None, ExitCause.USER_ERROR),
        ("FAILED", 1, 79, ExitCause.NODE_FAILURE_XID),  # the GPU fell off the bus
        ("NODE_FAIL", 0, None, ExitCause.NODE_FAILURE),
        ("NODE_FAIL", 0, 48, ExitCause.NODE_FAILURE_XID),
        ("PREEMPTED", 0, None, ExitCause.PREEMPTION),
        ("TIMEOUT", 0, None, ExitCause.TIMEOUT),
        ("CANCELLED by 1000", 0, None, ExitCause.CANCELLED),
        ("cancelled", None, None, ExitCause.CANCELLED),
        (None, None, None, ExitCause.UNKNOWN),
        ("RUNNING", None, None, ExitCause.UNKNOWN),
    ],
)
def test_exit_cause(
    state: str | None, code: int | None, xid: int | None, expected: ExitCause
) -> None:
    assert exit_cause(state, code, xid=xid) is expected
