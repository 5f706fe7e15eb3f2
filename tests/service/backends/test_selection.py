"""The metrics_backend setting picks the reader; the Prometheus reader's grid and HTTP calls."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.errors import ConfigError
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends import MetricsBackendError, PrometheusSamples, sample_reader
from hpcscope.service.backends.prometheus import MAX_POINTS_PER_QUERY, read_grid
from hpcscope.service.settings import Settings, load_settings
from hpcscope.store import Store
from hpcscope.store.reports import EmbeddedSamples

T0 = datetime(2026, 3, 1, 12, 0, 0)


def test_the_setting_chooses_the_reader(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.duckdb")
    try:
        assert isinstance(sample_reader(Settings(), store), EmbeddedSamples)
        remote = sample_reader(
            Settings(metrics_backend="prometheus", prometheus_url="http://vm:8428/"), store
        )
        assert isinstance(remote, PrometheusSamples)
        assert remote.url == "http://vm:8428"
    finally:
        store.close()


def test_the_prometheus_backend_needs_a_url(tmp_path: Path) -> None:
    path = tmp_path / "hpcscope.yaml"
    path.write_text("metrics_backend: prometheus\n")
    with pytest.raises(ConfigError, match="prometheus_url"):
        load_settings(path)


@given(
    span_ms=st.integers(0, 3 * 86_400_000),
    step_seconds=st.sampled_from([0.5, 1.0, 2.0, 15.0, 60.0]),
)
def test_the_grid_covers_the_window_end_to_end(span_ms: int, step_seconds: float) -> None:
    end = T0 + timedelta(milliseconds=span_ms)
    grid = read_grid(T0, end, step_seconds)
    start_ms = round(epoch_seconds(T0) * 1000)
    steps = [step for _, _, step in grid]
    assert len(set(steps)) == 1 and steps[0] <= max(1, round(step_seconds * 1000))
    step = steps[0]
    points = sum((last - first) // step + 1 for first, last, _ in grid)
    assert all((last - first) // step <= MAX_POINTS_PER_QUERY for first, last, _ in grid)
    assert grid[0][0] == start_ms
    for (_, last, _), (first, _, _) in itertools.pairwise(grid):
        assert first == last + step  # no point twice, none skipped
    assert 0 <= (start_ms + span_ms) - grid[-1][1] < max(points, 2)  # ends within n ms


def test_the_reader_posts_query_range_and_converts_the_answer() -> None:
    seen: list[dict[str, list[str]]] = []
    answer = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {
                        "__name__": "DCGM_FI_PROF_SM_ACTIVE",
                        "gpu": "3",
                        "node": "gpu01",
                        "hpc_job": "4410001",
                    },
                    "values": [[epoch_seconds(T0), "0.5"]],
                }
            ],
        },
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/api/v1/query_range"
        seen.append(parse_qs(request.content.decode()))
        return httpx2.Response(200, json=answer)

    reader = PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=60,
        now=lambda: T0,
        transport=httpx2.MockTransport(handler),
    )
    rows = reader.samples_for_jobs(["4410001"]).to_pylist()
    assert [(r["node"], r["gpu"], r["job_id"], r["sm_active_ratio"]) for r in rows] == [
        ("gpu01", 3, "4410001", 0.5)
    ]
    assert seen[0]["step"] == ["15.000"]
    assert 'hpc_job=~"4410001"' in seen[0]["query"][0]
    assert reader.samples_for_jobs([]).num_rows == 0


def test_an_unreachable_backend_is_a_typed_error() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    reader = PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=60,
        transport=httpx2.MockTransport(refuse),
    )
    with pytest.raises(MetricsBackendError, match="connection refused"):
        reader.samples_for_jobs(["1"])


def test_an_error_answer_names_the_backend() -> None:
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})
    reader = PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=60,
        transport=httpx2.MockTransport(
            lambda request: httpx2.Response(
                400, content=body, headers={"content-type": "application/json"}
            )
        ),
    )
    with pytest.raises(Exception, match="bad_data: parse error") as caught:
        reader.samples_for_jobs(["1"])
    assert "http://prom:9090/api/v1/query_range" in str(caught.value)
