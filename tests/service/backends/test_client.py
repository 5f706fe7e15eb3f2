"""The engine client: authentication, tenants, cluster URLs, retries, limits and its errors.

Against real front doors where one runs here (vmauth for bearer and basic authentication,
VictoriaMetrics at a cluster-shaped URL, Prometheus requiring a client certificate, a closed
port for an engine that is down); the retry schedule, the tenant header and the limits on a
recording transport (no Mimir is installable here, and a real engine cannot be told to fail
twice and then answer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs

import httpx2
import pytest

from hpcscope.service.backends import EngineClient, EngineConfig, MetricsBackendError
from hpcscope.service.settings import Settings
from tests.support.engines import (
    bare_victoria_metrics,
    prometheus_requiring_client_certificates,
    tls_files,
    vmauth,
)
from tests.support.servers import free_port

T0 = datetime(2026, 3, 1, 12, 0, 0)


def _vector(count: int, value: str = "1") -> dict[str, object]:
    result = [{"metric": {"gpu": str(i)}, "value": [1772366400, value]} for i in range(count)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def _client(
    handler: Callable[[httpx2.Request], httpx2.Response],
    *,
    sleeps: list[float] | None = None,
    **config: object,
) -> EngineClient:
    return EngineClient(
        EngineConfig(url="http://engine:9090", **config),  # type: ignore[arg-type]
        transport=httpx2.MockTransport(handler),
        sleep=(sleeps.append if sleeps is not None else lambda _: None),
        now=lambda: T0,
    )


# ------------------------------------------------------------------ retries and errors


def test_an_engine_that_is_not_there_is_retried_then_named_with_the_query() -> None:
    port = free_port()  # nothing listens on it
    sleeps: list[float] = []
    client = EngineClient(
        EngineConfig(url=f"http://127.0.0.1:{port}", retries=2, backoff_seconds=0.25),
        sleep=sleeps.append,
    )
    with pytest.raises(MetricsBackendError) as caught:
        client.query("up", at=T0)
    message = str(caught.value)
    assert f"http://127.0.0.1:{port}/api/v1/query did not answer after 3 tries" in message
    assert "ConnectError" in message and "query 'up'" in message
    assert sleeps == [0.25, 0.5]  # doubled per retry
    assert client.health.down and client.health.last_error == message


def test_busy_answers_are_retried_with_backoff_and_retry_after() -> None:
    statuses = iter([503, 429, 200])
    sleeps: list[float] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        status = next(statuses)
        if status == 200:
            return httpx2.Response(200, json=_vector(1))
        headers = {"retry-after": "3"} if status == 429 else {}
        return httpx2.Response(status, text="busy", headers=headers)

    client = _client(handler, sleeps=sleeps, retries=3, backoff_seconds=0.5)
    assert len(client.query("up", at=T0).series) == 1
    assert sleeps == [0.5, 3.0]  # the second wait is the engine's Retry-After
    assert not client.health.down and client.health.last_success == T0


def test_a_refused_query_is_not_retried_and_says_why() -> None:
    calls: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(parse_qs(request.content.decode())["query"][0])
        body = {"status": "error", "errorType": "bad_data", "error": "1:4: parse error"}
        return httpx2.Response(400, json=body)

    client = _client(handler, retries=3)
    with pytest.raises(MetricsBackendError) as caught:
        client.query("sum(", at=T0)
    assert calls == ["sum("]
    assert str(caught.value) == (
        "http://engine:9090/api/v1/query refused (HTTP 400, bad_data: 1:4: parse error); "
        "query 'sum('"
    )


def test_a_real_prometheus_refusing_a_query_is_named(tmp_path: Path) -> None:
    tls = tls_files(tmp_path / "tls")
    with prometheus_requiring_client_certificates(tmp_path / "prom", tls) as url:
        client = EngineClient(
            EngineConfig(
                url=url,
                ca_file=tls.ca,
                client_certfile=tls.client_cert,
                client_keyfile=tls.client_key,
            )
        )
        with pytest.raises(MetricsBackendError) as caught:
            client.query("rate(up[5m]", at=T0)
        assert f"{url}/api/v1/query refused (HTTP 400, bad_data:" in str(caught.value)
        assert "query 'rate(up[5m]'" in str(caught.value)
        # with its certificate the client is answered
        answer = client.query("vector(7)", at=T0)
        assert answer.series[0].last == 7.0
        # without one, the TLS handshake is refused: an engine that does not answer
        bare = EngineClient(EngineConfig(url=url, ca_file=tls.ca, retries=0))
        with pytest.raises(MetricsBackendError, match="did not answer after 1 tries"):
            bare.query("vector(7)", at=T0)
        client.close()
        bare.close()


# ------------------------------------------------------------------ authentication, tenants


def test_bearer_and_basic_through_a_real_vmauth(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    password_file = tmp_path / "password"
    password_file.write_text("s3cret\n")
    with (
        bare_victoria_metrics(tmp_path / "vm") as vm_url,
        vmauth(
            vm_url, tmp_path / "auth", token="second-token", user="reader", password="s3cret"
        ) as url,
    ):
        bearer = EngineClient(EngineConfig(url=url, bearer_token_file=token_file, retries=0))
        # vmauth 1.79 answers an unknown token with 400 and says so
        with pytest.raises(MetricsBackendError, match=r"refused \(HTTP 400, cannot find the"):
            bearer.query("vector(1)", at=T0)
        token_file.write_text("second-token\n")  # a rotated token is read again
        assert bearer.query("vector(1)", at=T0).series[0].last == 1.0
        basic = EngineClient(
            EngineConfig(url=url, basic_user="reader", basic_password_file=password_file, retries=0)
        )
        assert basic.query("vector(2)", at=T0).series[0].last == 2.0
        nobody = EngineClient(EngineConfig(url=url, retries=0))
        with pytest.raises(MetricsBackendError, match=r"refused \(HTTP 401"):
            nobody.query("vector(3)", at=T0)
        for client in (bearer, basic, nobody):
            client.close()


def test_a_victoria_metrics_cluster_url_is_a_base(tmp_path: Path) -> None:
    with bare_victoria_metrics(tmp_path / "vm", path_prefix="/select/0") as vm_url:
        client = EngineClient(EngineConfig(url=f"{vm_url}/select/0/prometheus/"))
        assert client.url == f"{vm_url}/select/0/prometheus"
        assert client.query("vector(4)", at=T0).series[0].last == 4.0
        client.close()


def test_the_tenant_goes_as_x_scope_orgid() -> None:
    seen: list[httpx2.Headers] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers)
        return httpx2.Response(200, json=_vector(1))

    _client(handler, tenant="team-a").query("up", at=T0)
    assert seen[0]["x-scope-orgid"] == "team-a"
    assert "authorization" not in seen[0]


def test_settings_make_the_config(tmp_path: Path) -> None:
    settings = Settings(
        metrics_backend="prometheus",
        prometheus_url="http://mimir:8080/prometheus/",
        prometheus_tenant="t1",
        prometheus_basic_user="u",
        prometheus_basic_password_file=tmp_path / "p",
        prometheus_retries=5,
    )
    config = EngineConfig.from_settings(settings)
    assert (config.url, config.tenant, config.basic_user, config.retries) == (
        "http://mimir:8080/prometheus",
        "t1",
        "u",
        5,
    )
    with pytest.raises(ValueError, match="go together"):
        Settings(prometheus_basic_user="u")
    with pytest.raises(ValueError, match="go together"):
        Settings(prometheus_client_certfile=tmp_path / "c")


def test_an_unreadable_secret_names_its_file(tmp_path: Path) -> None:
    client = _client(
        lambda request: httpx2.Response(200, json=_vector(1)),
        bearer_token_file=tmp_path / "missing",
    )
    with pytest.raises(MetricsBackendError, match="cannot read the bearer token file"):
        client.query("up", at=T0)


# ------------------------------------------------------------------ limits


def test_too_many_series_are_refused_with_the_query() -> None:
    client = _client(lambda request: httpx2.Response(200, json=_vector(11)), max_series=10)
    with pytest.raises(MetricsBackendError, match=r"11 series, more than prometheus_max_series"):
        client.query('{__name__=~".+"}', at=T0)


def test_a_long_range_is_read_in_chunks_within_the_point_limit() -> None:
    forms: list[dict[str, list[str]]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        form = parse_qs(request.content.decode())
        forms.append(form)
        start, end, step = (float(form[k][0]) for k in ("start", "end", "step"))
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        result = [
            {"metric": {"gpu": str(g)}, "values": [[t, "1"] for t in times]} for g in range(10)
        ]
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return httpx2.Response(200, content=json.dumps(body))

    client = _client(handler, max_points=100_000)
    answer = client.query_range("x", start=0.0, end=29_999.0, step=1.0)
    assert len(answer.series) == 10
    assert all(s.values.size == 30_000 for s in answer.series)
    times = answer.series[0].times
    assert times[0] == 0.0 and times[-1] == 29_999.0 and (times[1:] > times[:-1]).all()
    # the first chunk is Prometheus' 10,000 steps; then at most half the points budget each
    steps = [round((float(f["end"][0]) - float(f["start"][0])) + 1) for f in forms]
    assert steps[0] == 10_000 and max(steps[1:]) * 10 <= 50_000


def test_a_chunk_over_the_point_limit_is_refused() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        result = [{"metric": {"gpu": str(g)}, "values": [[0, "1"]] * 20} for g in range(100)]
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return httpx2.Response(200, content=json.dumps(body))

    client = _client(handler, max_points=1_000)
    with pytest.raises(MetricsBackendError, match="2000 points, more than prometheus_max_points"):
        client.query_range("x", start=0.0, end=19.0, step=1.0)
