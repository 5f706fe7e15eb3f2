"""Headers on every kind of response, TLS with a Secure cookie, the default bind address, and
upload limits, from outside over HTTP(S)."""

from __future__ import annotations

import gzip
import ssl
from pathlib import Path

import httpx2
import pytest
from fastapi import FastAPI

from hpcscope.serve.server import uvicorn_config
from hpcscope.service.settings import Settings
from tests.conftest import basic_auth
from tests.security.conftest import Serve

RESPONSES = [
    ("/login", 200),  # page
    ("/healthz", 200),  # API
    ("/static/css/app.css", 200),  # static file
    ("/static/vendor/htmx-4.0.1.min.js", 200),
    ("/api/whoami", 401),  # error: unauthenticated
    ("/no/such/page", 404),  # error: not found
]


def _assert_edge_headers(response: httpx2.Response) -> None:
    csp = response.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "'unsafe-inline'" not in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_security_headers_on_pages_api_static_files_and_errors(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as client:
        for path, status in RESPONSES:
            response = client.get(path)
            assert response.status_code == status, path
            _assert_edge_headers(response)
            assert "server" not in response.headers  # no software banner
        refused = client.post("/logout", headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403
        _assert_edge_headers(refused)


def test_over_plain_http_the_cookie_is_not_secure(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as client:
        login = client.post("/login", data={"username": "bob", "password": "bob-demo"})
        assert login.status_code == 303
        assert "secure" not in login.headers["set-cookie"].lower()


def _trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def test_tls_serves_https_with_a_secure_cookie(
    serve: Serve, self_signed: tuple[Path, Path]
) -> None:
    cert, key = self_signed
    with (
        serve(tls_certfile=cert, tls_keyfile=key) as base,
        httpx2.Client(base_url=base, timeout=30, verify=_trusting(cert)) as client,
    ):
        assert base.startswith("https://127.0.0.1:")
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.headers["strict-transport-security"].startswith("max-age=")
        _assert_edge_headers(health)
        login = client.post("/login", data={"username": "bob", "password": "bob-demo"})
        assert login.status_code == 303
        flags = [part.strip().lower() for part in login.headers["set-cookie"].split(";")]
        assert {"secure", "httponly", "samesite=lax"} <= set(flags)
        assert client.get("/api/whoami").json()["user"] == "bob"
    with pytest.raises(httpx2.HTTPError):  # and plain HTTP is not spoken on that port
        httpx2.get(base.replace("https://", "http://") + "/healthz", timeout=5).raise_for_status()


def test_a_proxy_saying_https_is_believed_only_when_trusted(serve: Serve) -> None:
    login = {"username": "bob", "password": "bob-demo"}
    forwarded = {"X-Forwarded-Proto": "https"}
    with serve(trusted_proxies=["127.0.0.1"]) as base, httpx2.Client(base_url=base) as client:
        cookie = client.post("/login", data=login, headers=forwarded).headers["set-cookie"]
        assert "secure" in cookie.lower()
    with serve() as base, httpx2.Client(base_url=base) as client:
        cookie = client.post("/login", data=login, headers=forwarded).headers["set-cookie"]
        assert "secure" not in cookie.lower()


def test_the_server_binds_loopback_unless_told_otherwise() -> None:
    assert Settings().host == "127.0.0.1"
    assert uvicorn_config(FastAPI(), Settings()).host == "127.0.0.1"


def test_upload_limits_answer_413_naming_the_limit(serve: Serve) -> None:
    bomb = gzip.compress(b" " * (32 << 20))  # 32 MiB of spaces in ~32 KB
    with (
        serve(upload_max_expansion_ratio=50, upload_max_members=2) as base,
        httpx2.Client(base_url=base, timeout=60, headers=basic_auth("alice")) as client,
    ):
        response = client.post(
            "/api/traces", files=[("files", ("rank0.json.gz", bomb, "application/gzip"))]
        )
        assert response.status_code == 413
        assert "rank0.json.gz" in response.json()["error"]
        assert "upload_max_expansion_ratio" in response.json()["error"]
        three = [("files", (f"r{i}.json", b"{}", "application/json")) for i in range(3)]
        response = client.post("/api/traces", files=three)
        assert response.status_code == 413
        assert "upload_max_members" in response.json()["error"]
