"""The trace pages in a real headless Chromium: upload by keyboard, the result with its uPlot
chart, no console errors, reduced motion respected."""

from __future__ import annotations

from typing import Any

import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.support.browser import login, screenshot
from tests.support.paths import FIXTURES
from tests.support.servers import live_server

pytestmark = pytest.mark.browser

PARAM = FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"


def test_upload_and_read_the_result_by_keyboard(service: Service, page: Any) -> None:
    page.emulate_media(reduced_motion="reduce")
    with live_server(create_app(service)) as base_url:
        login(page, base_url, "alice", "alice-demo")
        page.goto(f"{base_url}/traces")
        page.set_input_files("#files", str(PARAM))
        page.focus("#files")
        page.keyboard.press("Tab")  # job id
        page.keyboard.press("Tab")  # threshold
        page.keyboard.press("Tab")  # submit
        assert page.evaluate("document.activeElement.textContent") == "Analyse"
        page.keyboard.press("Enter")
        page.wait_for_url(f"{base_url}/traces/*")
        page.wait_for_selector("#trace-chart canvas")
        text = page.inner_text("main")
        assert "Rank 7 is the straggler" in text
        assert "slowest in forward" in text
        assert page.locator("#phase-table tbody tr").count() == 8
        screenshot(page, "trace-analysis")
        page.goto(f"{base_url}/traces")
        assert page.locator("#analyses tbody tr").count() == 1
        screenshot(page, "trace-list")
