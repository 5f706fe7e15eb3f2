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
#: Console errors of the test's page, and how many there were when the test body ended.
_PROBLEMS = pytest.StashKey[list[str]]()
_PROBLEMS_AT_END = pytest.StashKey[int]()
#: What a page polling its server logs once a live-server fixture has stopped the server
#: (fixtures are torn down before ``page`` when they were set up after it).
_SERVER_GONE = "net::ERR_CONNECTION_REFUSED"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        problems = item.stash.get(_PROBLEMS, None)
        if problems is not None:
            item.stash[_PROBLEMS_AT_END] = len(problems)


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
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
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
    request.node.stash[_PROBLEMS] = problems
    yield page
    context.close()
    # after the test body, a refused connection is the server fixture stopping first
    end = request.node.stash.get(_PROBLEMS_AT_END, len(problems))
    problems = problems[:end] + [p for p in problems[end:] if _SERVER_GONE not in p]
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
