"""A read of the recording rules asks only the columns its caller uses (the verdicts' six)."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import parse_qs

import httpx2
import polars as pl
import pytest

from hpcscope.analysis.jobs.aggregates import (
    GPU_TIME_COLUMNS,
    VERDICT_COLUMNS,
    gpu_time_of,
    summary_from_aggregates,
)
from hpcscope.model.backends import GPU_AGGREGATE_SCHEMA
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends import PrometheusSamples

T0 = datetime(2026, 3, 1, 12, 0, 0)
PROBE = "max(timestamp("
JOB = "4410001"
#: Per rule (a substring of its query) and GPU: the value the engine answers.
VALUES: dict[str, tuple[float | None, float | None]] = {
    "DCGM_FI_DEV_GPU_UTIL:observed_seconds": (240.0, 240.0),
    "DCGM_FI_PROF_SM_ACTIVE:useful_seconds": (120.0, 30.0),
    "DCGM_FI_DEV_GPU_UTIL:sum": (1_520.0, 1_440.0),
    "DCGM_FI_PROF_SM_ACTIVE:sum": (8.0, 2.0),
    "DCGM_FI_DEV_XID_ERRORS:changed_last": (None, 79.0),  # GPU 0's never changed: no series
    ":count": (16.0, 16.0),
    "timestamp(": (epoch_seconds(T0) - 120.0, epoch_seconds(T0) - 120.0),
}


def _value(query: str, gpu: int) -> float | None:
    for part, values in VALUES.items():
        if part in query:
            return values[gpu]
    return 10.0 + gpu  # every other rule: a value, so that a full read fills every column


def _reader(asked: list[str]) -> PrometheusSamples:
    def handler(request: httpx2.Request) -> httpx2.Response:
        query = parse_qs(request.content.decode())["query"][0]
        if not query.startswith(PROBE):  # which evaluations a read holds (test_rule_cache.py)
            asked.append(query)
        result = [
            {
                "metric": {"hpc_job": JOB, "node": "gpu01", "gpu": str(gpu)},
                "value": [epoch_seconds(T0), str(_value(query, gpu))],
            }
            for gpu in (0, 1)
            if _value(query, gpu) is not None
        ]
        answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx2.Response(200, json=answer)

    return PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=3600,
        recording_rules="always",
        now=lambda: T0,
        transport=httpx2.MockTransport(handler),
    )


def test_a_verdict_read_asks_its_columns_only_and_finds_the_same_verdicts() -> None:
    asked: list[str] = []
    reader = _reader(asked)
    since = T0 - timedelta(minutes=5)
    try:
        whole = reader.job_gpus([JOB], since=since, until=T0).aggregates
        assert len(asked) == len(GPU_AGGREGATE_SCHEMA) - 4  # every column but the GPU's keys
        asked.clear()
        some = reader.job_gpus([JOB], since=since, until=T0, columns=VERDICT_COLUMNS).aggregates
        assert len(asked) == len(VERDICT_COLUMNS)
    finally:
        reader.close()
    assert whole is not None and some is not None
    assert some.column_names == whole.column_names and some.num_rows == whole.num_rows == 2
    for name in whole.column_names:
        if name in VERDICT_COLUMNS or name in ("job_id", "node", "gpu", "gpu_instance_id"):
            assert some[name] == whole[name], name
        else:
            assert some[name].null_count == some.num_rows, name
    verdicts = [summary_from_aggregates(pl.DataFrame(table)).sort("gpu") for table in (whole, some)]
    used = ["job_id", "node", "gpu", "reported_util_ratio", "sm_active_ratio", "xid", "verdict"]
    assert verdicts[0].select(used).equals(verdicts[1].select(used))
    assert verdicts[1]["verdict"].to_list() == ["straggler", "xid_error"]  # peers read too


def test_the_gpu_time_read_asks_its_columns_only_and_finds_the_same_time() -> None:
    asked: list[str] = []
    reader = _reader(asked)
    since = T0 - timedelta(minutes=5)
    try:
        whole = reader.job_gpus([JOB], since=since, until=T0).aggregates
        asked.clear()
        time = reader.gpu_time([JOB], since=since, until=T0, max_interval_seconds=45.0)
        assert len(asked) == len(GPU_TIME_COLUMNS)
    finally:
        reader.close()
    assert whole is not None
    assert time == gpu_time_of(summary_from_aggregates(pl.DataFrame(whole)))
    assert time.allocated_seconds == 480.0 and time.useful_seconds == 150.0


def test_an_unknown_column_is_refused() -> None:
    reader = _reader([])
    try:
        with pytest.raises(ValueError, match="sm_active_ratio"):
            reader.job_gpus(
                [JOB], since=T0 - timedelta(minutes=5), until=T0, columns={"sm_active_ratio"}
            )
    finally:
        reader.close()
