"""The API tokens page in a real headless Chromium: create a token by keyboard, see it once,
use it from a script, revoke it with the page's button; no console errors."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.support.browser import screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_create_use_and_revoke_a_token_in_the_browser(service: Service, page: Any) -> None:
    with live_server(create_app(service)) as base_url:
        page.goto(f"{base_url}/login?next=/tokens")
        page.keyboard.type("alice")
        page.keyboard.press("Tab")
        page.keyboard.type("alice-demo")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{base_url}/tokens")
        page.get_by_label("What it is for").fill("notebook")
        assert page.locator("#scope option").all_inner_texts() == ["read"]  # no admin scope
        page.get_by_label("What it is for").press("Enter")
        page.wait_for_selector("#token-secret")
        secret = page.inner_text("#token-secret").strip()
        screenshot(page, "tokens-created")
        assert secret.startswith("hps_") and len(secret) == 50
        bearer = {"Authorization": f"Bearer {secret}"}
        whoami = httpx2.get(f"{base_url}/api/whoami", headers=bearer, timeout=30)
        assert whoami.status_code == 200 and whoami.json()["user"] == "alice"
        page.goto(f"{base_url}/tokens")
        assert secret not in page.content()  # shown once
        page.get_by_role("button", name="Revoke").click()
        page.wait_for_url(f"{base_url}/tokens")
        assert "revoked" in page.inner_text("#tokens")
        screenshot(page, "tokens-revoked")
        assert httpx2.get(f"{base_url}/api/whoami", headers=bearer, timeout=30).status_code == 401
