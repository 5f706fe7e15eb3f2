"""The API reference page in a real headless Chromium: vendored Swagger UI renders every
operation of the OpenAPI document under the strict Content-Security-Policy, with no request
leaving the server and no console error (a CSP violation is one)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.support.browser import screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_api_reference_renders_from_our_own_files(service: Service, page: Any) -> None:
    app = create_app(service)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    with live_server(app) as base_url:
        response = page.goto(f"{base_url}/api/docs")
        assert response is not None and response.status == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "unsafe-inline" not in csp
        page.wait_for_selector(".opblock", timeout=20_000)
        operations = page.locator(".opblock").count()
        paths = app.openapi()["paths"]
        expected = sum(len(methods) for methods in paths.values())
        assert operations == expected > 10
        assert page.locator(".info .title").inner_text().startswith("hpcscope")
        screenshot(page, "api-docs-desktop")
    own = urlsplit(base_url).netloc
    assert requested and all(urlsplit(url).netloc == own for url in requested), requested
