"""The web edge in-process: CSRF on every route, headers on every response, proxy trust,
Secure cookies over HTTPS, the login throttle on the form and on HTTP Basic."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.routing import BaseRoute, Mount, Route

from hpcscope.serve.app import create_app
from hpcscope.serve.edge import SAFE_METHODS, EdgeMiddleware
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from tests.conftest import basic_auth

EVIL = "https://evil.example"
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def edge_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    settings = Settings(
        store_path=tmp_path_factory.mktemp("edge") / "s.duckdb",
        secret_key="t",
        trusted_proxies=["10.0.0.0/24"],
        trusted_origins=["https://hpcscope.example.org"],
    )
    service = Service.open(settings, users=UserDirectory.demo())
    yield service
    service.close()


@pytest.fixture
def app(edge_service: Service) -> FastAPI:
    return create_app(edge_service)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def _paths_and_methods(routes: Iterable[BaseRoute], prefix: str = "") -> list[tuple[str, set[str]]]:
    """Every route of the app (``app.routes``, into included routers: FastAPI keeps those
    behind a wrapper with ``original_router``) as (concrete path, methods)."""
    out: list[tuple[str, set[str]]] = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            out += _paths_and_methods(included.routes, prefix + getattr(context, "prefix", ""))
        elif isinstance(route, Mount):
            out.append((prefix + route.path + "/x", {"GET"}))
        elif isinstance(route, APIRoute | Route):
            out.append((_concrete(prefix + route.path), set(route.methods or {"GET"})))
        else:
            raise AssertionError(f"a route of a kind this walk does not know: {route!r}")
    return out


def test_every_route_refuses_a_cross_site_state_change(app: FastAPI, client: TestClient) -> None:
    routes = _paths_and_methods(app.routes)
    changing = [(p, m) for p, ms in routes for m in ms if m not in SAFE_METHODS]
    assert len(changing) >= 9  # login, logout, uploads, links, Falco ingest...
    for path, methods in routes:
        for method in {"POST"} | (methods - SAFE_METHODS):
            response = client.request(method, path, headers={"Origin": EVIL})
            assert response.status_code == 403, (method, path, response.status_code)
            assert "Origin" in response.json()["detail"]
            response = client.request(method, path, headers={"Referer": f"{EVIL}/page"})
            assert response.status_code == 403, (method, path)


def test_a_cookie_without_origin_or_referer_is_refused(client: TestClient) -> None:
    client.cookies.set("hpcscope_session", "anything")
    assert client.post("/logout").status_code == 403
    assert client.post("/logout", headers={"Origin": "null"}).status_code == 403


def test_same_origin_and_trusted_origins_pass(client: TestClient) -> None:
    for origin in ("http://testserver", "https://hpcscope.example.org"):
        response = client.post("/logout", headers={"Origin": origin}, follow_redirects=False)
        assert response.status_code == 303
    response = client.post(
        "/logout", headers={"Referer": "http://testserver/jobs"}, follow_redirects=False
    )
    assert response.status_code == 303


def test_cross_site_reads_are_not_refused(client: TestClient) -> None:
    assert client.get("/healthz", headers={"Origin": EVIL}).status_code == 200


def test_scripts_without_cookies_are_not_asked_for_an_origin(app: FastAPI) -> None:
    with TestClient(app, headers=basic_auth("admin")) as admin:
        response = admin.post("/api/traces/directory", json={"path": "/no/such/dir"})
    assert response.status_code not in (401, 403)


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/login", "page"),
        ("/api/whoami", "api 401"),
        ("/healthz", "api"),
        ("/static/css/app.css", "static"),
        ("/no/such/page", "404"),
        ("/api/docs", "page"),
    ],
)
def test_security_headers_on_every_kind_of_response(
    client: TestClient, path: str, kind: str
) -> None:
    headers = client.get(path).headers
    csp = headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert "strict-transport-security" not in headers  # plain HTTP


def test_a_refusal_carries_the_headers_too(client: TestClient) -> None:
    response = client.post("/login", headers={"Origin": EVIL})
    assert response.status_code == 403
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def _login(client: TestClient, **headers: str) -> str:
    response = client.post(
        "/login",
        data={"username": "bob", "password": "bob-demo"},
        headers=headers,
        follow_redirects=False,
    )
    assert response.status_code == 303
    return response.headers["set-cookie"]


def test_the_session_cookie_is_lax_and_httponly_but_not_secure_over_http(
    client: TestClient,
) -> None:
    cookie = _login(client).lower()
    assert "httponly" in cookie and "samesite=lax" in cookie
    assert "secure" not in cookie


def test_the_session_cookie_is_secure_over_https(app: FastAPI) -> None:
    with TestClient(app, base_url="https://testserver") as tls:
        cookie = _login(tls).lower()
        assert "; secure" in cookie
        assert "strict-transport-security" in tls.get("/healthz").headers


def test_a_trusted_proxy_saying_https_gets_a_secure_cookie(app: FastAPI) -> None:
    with TestClient(app, client=("10.0.0.5", 4000)) as proxied:
        assert "; secure" in _login(proxied, **{"X-Forwarded-Proto": "https"}).lower()


def test_anyone_else_saying_https_does_not(app: FastAPI) -> None:
    with TestClient(app, client=("192.0.2.1", 4000)) as direct:
        assert "secure" not in _login(direct, **{"X-Forwarded-Proto": "https"}).lower()


def _fail(client: TestClient, user: str = "bob", **headers: str) -> int:
    response = client.post("/login", data={"username": user, "password": "wrong"}, headers=headers)
    return response.status_code


def test_the_eleventh_failed_login_is_429_with_retry_after(client: TestClient) -> None:
    assert [_fail(client) for _ in range(10)] == [401] * 10
    response = client.post("/login", data={"username": "bob", "password": "bob-demo"})
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) >= 59
    assert "too many failed logins" in response.text


def test_the_forwarded_address_is_throttled_not_the_proxy(app: FastAPI) -> None:
    guard = app.state.login_guard
    with TestClient(app, client=("10.0.0.5", 4000)) as proxied:
        for i in range(10):
            _fail(proxied, f"user{i}", **{"X-Forwarded-For": "203.0.113.9"})
        assert _fail(proxied, "other", **{"X-Forwarded-For": "203.0.113.9"}) == 429
        assert _fail(proxied, "other", **{"X-Forwarded-For": "203.0.113.10"}) == 401
    lockouts = [r for r in guard.audit if r.kind == "lockout"]
    assert [(r.key, r.address) for r in lockouts] == [("address", "203.0.113.9")]


def test_http_basic_is_throttled_too(app: FastAPI) -> None:
    with TestClient(app, headers=basic_auth("alice", "wrong")) as guesser:
        codes = [guesser.get("/api/whoami").status_code for _ in range(11)]
    assert codes == [401] * 10 + [429]


def test_the_basic_challenge_is_only_for_basic_clients(client: TestClient) -> None:
    assert "www-authenticate" not in client.get("/api/whoami").headers
    asked = client.get("/api/whoami", headers=basic_auth("alice", "nope"))
    assert asked.headers["www-authenticate"].startswith("Basic")
    bearer = client.get("/api/whoami", headers={"Authorization": "Bearer abc"})
    assert bearer.status_code == 401 and "www-authenticate" not in bearer.headers


_ORIGINS = st.builds(
    lambda scheme, host, port: f"{scheme}://{host}{port}",
    st.sampled_from(["http", "https"]),
    st.sampled_from(
        ["testserver", "evil.example", "testserver.evil.example", "hpcscope.example.org"]
    ),
    st.sampled_from(["", ":80", ":8443"]),
)


@settings(max_examples=200)
@given(
    method=st.sampled_from(["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]),
    origin=st.none() | _ORIGINS,
    referer=st.none() | _ORIGINS.map(lambda o: o + "/some/page"),
    cookie=st.booleans(),
)
def test_the_csrf_decision(
    method: str, origin: str | None, referer: str | None, cookie: bool
) -> None:
    edge = EdgeMiddleware(app=None, trusted_origins=["https://hpcscope.example.org"])  # type: ignore[arg-type]
    headers = {b"host": b"testserver"}
    if origin is not None:
        headers[b"origin"] = origin.encode()
    if referer is not None:
        headers[b"referer"] = referer.encode()
    if cookie:
        headers[b"cookie"] = b"hpcscope_session=x"
    scope = {"type": "http", "method": method, "scheme": "http"}
    allowed = {"http://testserver", "https://hpcscope.example.org"}
    claimed = (
        origin if origin is not None else (referer.rsplit("/some/page")[0] if referer else None)
    )
    expected_ok = (
        method in SAFE_METHODS
        or (claimed is not None and claimed in allowed)
        or (claimed is None and not cookie)
    )
    assert (edge._csrf_refusal(scope, headers) is None) == expected_ok


def test_a_large_body_outside_the_uploads_is_413(client: TestClient) -> None:
    big = {"username": "bob", "password": "x" * (2 << 20)}
    response = client.post("/login", data=big)
    assert response.status_code == 413
    assert response.json() == {"detail": "request body over 1048576 bytes"}


def _chunked(body: bytes, size: int = 65536) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_chunked_body_is_counted_as_it_arrives(client: TestClient) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://testserver"}
    small = b"username=bob&password=bob-demo"
    response = client.post(
        "/login", content=_chunked(small, 8), headers=headers, follow_redirects=False
    )
    assert response.status_code == 303  # held, then handed on whole
    large = b"username=bob&password=" + b"x" * (2 << 20)
    assert client.post("/login", content=_chunked(large), headers=headers).status_code == 413


def test_uploads_stream_past_the_body_limit(app: FastAPI) -> None:
    not_a_trace = [("files", ("rank0.json", b"[" * (3 << 20), "application/json"))]
    with TestClient(app, headers=basic_auth("alice")) as alice:
        response = alice.post("/api/traces", files=not_a_trace)
    assert response.status_code == 422  # reached the analysis, which names the file
    assert "rank0.json" in response.json()["error"]
