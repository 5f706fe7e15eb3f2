"""The chargeback page in a real headless Chromium: the team lead's table by cause, the
decision-maker view with the trend, the printable account report, a keyboard walk through the
form, screenshots, no console errors (the ``page`` fixture fails on any)."""

from __future__ import annotations

from typing import Any

import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.support.browser import login, screenshot
from tests.support.chargeback_data import write_chargeback_jobs
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_team_lead_reads_chargeback_and_prints_the_account_report(
    service: Service, page: Any
) -> None:
    write_chargeback_jobs(service.store)
    with live_server(create_app(service)) as base:
        login(page, base, "carol", "carol-demo")
        page.goto(f"{base}/chargeback?period=2026-11")
        rows = page.locator("#chargeback tbody tr")
        assert sorted(rows.nth(i).locator("th").inner_text() for i in range(rows.count())) == [
            "nlp",
            "vision",
        ]
        main = page.locator("main").inner_text()
        assert "speech" not in main and "dave" not in main  # not carol's accounts
        assert "GPU-h" in main and "USD" in main
        screenshot(page, "chargeback-lead")

        # keyboard walk: from the page's top, Tab reaches each control of the form in order
        page.locator("main").focus()
        reached: list[str] = []
        for _ in range(40):
            page.keyboard.press("Tab")
            name = page.evaluate(
                "() => document.activeElement.getAttribute('name') || "
                "document.activeElement.textContent.trim()"
            )
            reached.append(str(name))
            if name == "Show":
                break
        assert [n for n in reached if n in ("by", "period", "view", "Show")] == [
            "by", "period", "view", "Show",
        ]  # fmt: skip
        page.focus("select[name=view]")
        page.keyboard.press("ArrowDown")  # the decision-maker view
        page.focus("button:has-text('Show')")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert "view=decision" in page.url
        lost = page.locator("#lost tbody tr")
        assert lost.count() == 2 and page.locator("#trend tbody tr").count() == 2
        assert page.locator("#lost meter").count() == 2
        screenshot(page, "chargeback-decision")

        page.goto(f"{base}/chargeback?period=2026-11")
        page.click("a:has-text('report of vision')")
        page.wait_for_url("**/chargeback/report?account=vision&period=2026-11")
        assert "account vision, 2026-11" in page.locator("h1").inner_text()
        assert page.locator("#users tbody tr").count() == 1  # alice
        page.emulate_media(media="print")
        assert not page.locator("header.topbar").is_visible()  # printable: no navigation
        screenshot(page, "chargeback-report-print")
        page.emulate_media(media="screen")
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{base}/chargeback?period=2026-11")
        screenshot(page, "chargeback-phone")
