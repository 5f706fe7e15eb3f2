"""Playwright driving Debian's chromium: shared fixtures for browser tests.

Never downloads a browser: it launches ``/usr/bin/chromium`` (Debian package ``chromium``,
installed by ``make system-deps``) with ``executable_path``. A missing chromium fails the test
(it does not skip): CI must run the browser tests.

Use the ``page`` fixture; it records console errors and uncaught page errors, and fails the
test if any occurred. ``screenshot(page, name)`` saves ``test-artifacts/screenshots/<name>.png``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import ARTIFACTS

CHROMIUM = Path(os.environ.get("HPCSCOPE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
SCREENSHOTS = ARTIFACTS / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # module scope, not session: Playwright's sync API keeps an asyncio loop running in the main
    # thread while it is open, and later tests that call asyncio.run() must not see it
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} not found: browser tests need Debian's chromium (run `make system-deps`)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None
        ),
    )
    page.on("pageerror", lambda err: problems.append(f"pageerror: {err}"))
    page.console_problems = problems
    yield page
    context.close()
    assert not problems, "browser reported errors:\n" + "\n".join(problems)


def screenshot(page: Any, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot under test-artifacts/screenshots/ and return its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def login(page: Any, base_url: str, user: str, password: str) -> None:
    """Log in through the real login form."""
    page.goto(f"{base_url}/login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
