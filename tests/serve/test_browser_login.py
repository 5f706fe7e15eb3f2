"""The login page in a real headless Chromium: renders, keyboard-operable, no console errors."""

from __future__ import annotations

from typing import Any

import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.support.browser import screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_login_by_keyboard_then_whoami(service: Service, page: Any) -> None:
    with live_server(create_app(service)) as base_url:
        page.goto(f"{base_url}/login")
        screenshot(page, "login-desktop")
        page.keyboard.type("carol")  # the user field has autofocus
        page.keyboard.press("Tab")
        page.keyboard.type("carol-demo")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{base_url}/")
        whoami = page.request.get(f"{base_url}/api/whoami").json()
        assert whoami["user"] == "carol"
