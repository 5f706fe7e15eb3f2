"""The metrics_backend setting picks the reader; the Prometheus reader's grid and HTTP calls."""

from __future__ import annotations

import itertools
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.errors import ConfigError
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends import (
    EngineClient,
    EngineConfig,
    MetricsBackendError,
    PrometheusSamples,
    sample_reader,
)
from hpcscope.service.backends.engine_live import raw_range
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
    series=st.integers(1, 3000),
)
def test_raw_reads_tile_the_window_without_a_gap_or_a_repeat(
    span_ms: int, step_seconds: float, series: int
) -> None:
    """The range selectors of a raw read cover ``[since, until]`` to the millisecond, each
    window closed (Prometheus 2) and ending a millisecond before the next starts."""
    windows: list[tuple[int, int]] = []
    # one answer for every window, encoded once (up to ~1,500 windows of 3,000 series)
    result = [{"metric": {"gpu": str(g)}, "values": []} for g in range(series)]
    answer = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}
    ).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        form = parse_qs(request.content.decode())
        at = round(float(form["time"][0]) * 1000)
        match = re.search(r"\[(\d+)ms\]$", form["query"][0])
        assert match is not None and request.url.path == "/api/v1/query"
        windows.append((at - int(match.group(1)), at))
        return httpx2.Response(200, content=answer, headers={"Content-Type": "application/json"})

    engine = EngineClient(
        EngineConfig(url="http://prom:9090", max_series=10_000),
        transport=httpx2.MockTransport(handler),
    )
    until = T0 + timedelta(milliseconds=span_ms)
    raw_range(engine, "x", since=T0, until=until, step=step_seconds)
    windows.sort()
    assert windows[0][0] <= round(epoch_seconds(T0) * 1000)
    assert windows[-1][1] == round(epoch_seconds(until) * 1000)
    for (_, last), (first, _) in itertools.pairwise(windows):
        assert first == last + 1
    budget = engine.config.max_points
    for first, last in windows[1:]:  # sized to half the point budget at the series seen
        assert (last - first) / (step_seconds * 1000) * series <= budget / 2 + series


def test_the_reader_reads_raw_samples_at_their_own_times() -> None:
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
                    "values": [[epoch_seconds(T0) - 7.25, "0.5"]],
                }
            ],
        },
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/api/v1/query"
        seen.append(parse_qs(request.content.decode()))
        return httpx2.Response(200, json=answer if len(seen) == 1 else _EMPTY)

    reader = PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=60,
        now=lambda: T0,
        transport=httpx2.MockTransport(handler),
        recording_rules="never",
    )
    rows = reader.samples_for_jobs(["4410001"]).to_pylist()
    assert [(r["ts"], r["node"], r["gpu"], r["job_id"], r["sm_active_ratio"]) for r in rows] == [
        (T0 - timedelta(seconds=7.25), "gpu01", 3, "4410001", 0.5)
    ]
    assert seen[0]["query"][0].endswith('hpc_job=~"4410001"}[60000ms]')
    assert reader.samples_for_jobs([]).num_rows == 0


_EMPTY = {"status": "success", "data": {"resultType": "matrix", "result": []}}


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
    assert "http://prom:9090/api/v1/query refused" in str(caught.value)
