"""The job page's alerts section in a real headless Chromium: shown to the owner, not to others."""

from __future__ import annotations

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


def test_job_page_lists_the_jobs_alerts(service: Service, page: Any) -> None:
    now = utcnow()
    populate(service.store, now=now, seconds=300)
    alert = Alert(
        "GI-3", Vector.GRADIENT_INJECTION, Severity.CRITICAL,
        "The ranks' reported gradients do not add up to the reduced gradient (a rank lied)",
        now, now, count=12, node="gpu01", job_id="102", user="bob", account="nlp", gpu=5,
        subject="rank 1 (suspected)", step=41,
        evidence=(Evidence("step 41: relative error 0.43", "/spool/102/rank-1.jsonl", "line 42"),),
    )  # fmt: skip
    upsert_alerts(service.store, [alert]).result()
    with live_server(create_app(service)) as base:
        login(page, base, "bob", "bob-demo")
        page.goto(f"{base}/jobs/102")
        section = page.locator("#job-alerts").inner_text()
        assert "CRITICAL" in section and "GI-3" in section and "rank 1 (suspected)" in section
        assert "gpu01" in section and "41" in section and "relative error" in section
        screenshot(page, "job-alerts-desktop")
        login(page, base, "alice", "alice-demo")  # her job 101 has none
        page.goto(f"{base}/jobs/101")
        assert "No alert on this job." in page.locator("#job-alerts").inner_text()
