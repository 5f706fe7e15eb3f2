"""The alerts page in a real headless Chromium: filters, acknowledge by keyboard, no errors."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.store.alerts import upsert_alerts
from tests.support.browser import login, screenshot
from tests.support.data import populate
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_alice_filters_and_acknowledges_her_alert(service: Service, page: Any) -> None:
    now = utcnow()
    populate(service.store, now=now)
    miner = Alert(
        "SC-2", Vector.SUPPLY_CHAIN, Severity.CRITICAL, "A binary run from a temp directory",
        now - timedelta(minutes=3), now, count=2, node="gpu01", job_id="101",
        subject="/tmp/ultralytics_runner",
        evidence=(Evidence("Falco rule 'Drop and execute new binary'", "falco.json", "line 1"),),
    )  # fmt: skip
    other = Alert(
        "W-1", Vector.DATA_POISONING, Severity.HIGH, "A foreign checkpoint read", now, now,
        node="gpu02", job_id="102", subject="/lustre/checkpoints/run-b",
    )  # fmt: skip
    upsert_alerts(service.store, [miner, other]).result()
    with live_server(create_app(service)) as base:
        login(page, base, "alice", "alice-demo")
        page.goto(f"{base}/alerts")
        rows = page.locator("#alerts tbody tr")
        assert rows.count() == 1 and "ultralytics_runner" in rows.first.inner_text()
        assert "run-b" not in page.locator("main").inner_text()  # bob's alert is not hers
        screenshot(page, "alerts-desktop")
        page.select_option("select[name=severity]", "HIGH")
        page.click("button:has-text('Filter')")
        page.wait_for_url(f"{base}/alerts?state=&severity=HIGH&vector=&job=")
        assert page.locator("#alerts tbody tr").count() == 1
        page.locator("button:has-text('Acknowledge')").focus()
        with page.expect_navigation():  # the form posts, the server sends the page back
            page.keyboard.press("Enter")
        assert "acknowledged" in page.locator("#alerts tbody tr").first.inner_text()
        page.set_viewport_size({"width": 390, "height": 844})
        screenshot(page, "alerts-phone")
