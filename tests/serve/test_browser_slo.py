"""The /slo page in a real headless Chromium: figures, a firing pair, keyboard, no errors.

The store holds a seeded month of sacct records ending a day ago and a bad hour ending now
(six good hours, then 4 failures in 5 jobs: the success SLO's page pair fires).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.service.slo.sacct_history import load_history, sacct_history
from tests.service.slo.test_engine import bad_hour
from tests.support.browser import login, screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_an_admin_reads_the_slos_and_walks_them_by_keyboard(service: Service, page: Any) -> None:
    now = utcnow()
    month_end = now - timedelta(days=1)
    load_history(service.store, sacct_history(now=month_end), now=month_end)
    service.store.upsert_jobs(bad_hour(end=now - timedelta(minutes=1), prefix="b")).result()
    with live_server(create_app(service)) as base:
        login(page, base, "admin", "admin-demo")
        page.goto(f"{base}/slo")
        main = page.locator("main")
        assert "every job of the cluster" in main.inner_text()
        sections = page.locator("section.slo")
        assert sections.count() == 3
        success = page.locator("#slo-job_success")
        assert "firing" in success.locator(".slo-alerts").inner_text()
        assert success.locator(".slo-history rect").count() >= 2  # the month's days and today
        efficiency = page.locator("#slo-gpu_efficiency .slo-alerts").inner_text()
        assert "cannot fire" in efficiency  # an objective of 0.5 caps the burn rate at 2x
        waits = page.locator("section[aria-labelledby=waits-title] tbody tr")
        assert waits.count() >= 4  # gpu/debug x normal/high
        screenshot(page, "slo-desktop")
        # the navigation reaches the page, and Tab reaches the history tables
        assert page.locator("nav a[href='/slo']").count() == 1
        summary = page.locator("#slo-queue_wait details summary")
        for _ in range(80):
            page.keyboard.press("Tab")
            if summary.evaluate("e => e === document.activeElement"):
                break
        else:
            pytest.fail("Tab never reached the queue-wait history")
        page.keyboard.press("Enter")
        table = page.locator("#slo-queue_wait details table")
        assert table.is_visible() and table.locator("tbody tr").count() == 30
        page.set_viewport_size({"width": 390, "height": 844})
        screenshot(page, "slo-phone")


def test_a_researcher_sees_her_own_jobs_only(service: Service, page: Any) -> None:
    month_end = utcnow() - timedelta(days=1)
    load_history(service.store, sacct_history(now=month_end), now=month_end)
    with live_server(create_app(service)) as base:
        login(page, base, "bob", "bob-demo")
        page.goto(f"{base}/slo")
        text = page.locator("main").inner_text()
        assert "your own jobs" in text
        accounts = page.locator("section[aria-labelledby=accounts-title] tbody tr")
        assert accounts.count() == 1 and "nlp" in accounts.first.inner_text()
        assert "vision" not in text and "speech" not in text
        screenshot(page, "slo-researcher")
