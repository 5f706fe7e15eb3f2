"""Cross-site state changes are refused from outside; same-origin ones and scripts pass."""

from __future__ import annotations

import httpx2
import pytest

from tests.conftest import basic_auth
from tests.security.conftest import Serve

EVIL = "https://evil.example"
CHANGES = ["/login", "/logout", "/traces", "/api/traces", "/api/traces/x/link", "/api/ingest/falco"]


@pytest.mark.parametrize("path", CHANGES)
def test_a_cross_site_post_is_refused(serve: Serve, path: str) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as client:
        for headers in ({"Origin": EVIL}, {"Origin": "null"}, {"Referer": f"{EVIL}/x"}):
            response = client.post(path, headers=headers, data={"username": "bob"})
            assert response.status_code == 403, (path, headers)
            assert "cross-site request refused" in response.json()["detail"]


def test_a_browser_session_needs_its_own_origin(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as browser:
        login = browser.post(
            "/login",
            data={"username": "bob", "password": "bob-demo"},
            headers={"Origin": base},
        )
        assert login.status_code == 303
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        # the session cookie alone, without Origin or Referer: refused
        assert browser.post("/logout").status_code == 403
        assert browser.get("/api/whoami").json()["user"] == "bob"
        assert browser.post("/logout", headers={"Origin": base}).status_code == 303
        browser.cookies.clear()
        assert browser.get("/api/whoami").status_code == 401


def test_a_trusted_origin_passes(serve: Serve) -> None:
    with (
        serve(trusted_origins=["https://hpcscope.example.org"]) as base,
        httpx2.Client(base_url=base, timeout=30) as client,
    ):
        response = client.post(
            "/login",
            data={"username": "bob", "password": "bob-demo"},
            headers={"Origin": "https://hpcscope.example.org"},
        )
        assert response.status_code == 303


def test_scripts_with_basic_and_no_cookie_are_exempt(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as script:
        response = script.post(
            "/api/traces/directory", json={"path": "/no/such/dir"}, headers=basic_auth("admin")
        )
        # reached the route, which names the missing directory
        assert response.status_code == 422, response.text
        assert "/no/such/dir" in response.text
