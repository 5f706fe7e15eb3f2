"""The overview and job pages in a real headless Chromium: figures, chart, keyboard, no errors."""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.jobs.retention import UpkeepConfig, run_upkeep
from hpcscope.store.cold import cold_dir
from tests.support.browser import login, screenshot
from tests.support.data import populate
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_overview_to_job_page_by_keyboard_with_the_chart(service: Service, page: Any) -> None:
    populate(service.store, now=utcnow(), seconds=600)
    with live_server(create_app(service)) as base:
        login(page, base, "carol", "carol-demo")
        page.goto(f"{base}/")
        tiles = page.locator(".gpu-tile")
        assert tiles.count() == 16
        # carol leads vision and nlp: she sees 101 and 102, dave's 103 is "allocated"
        assert page.locator("#gpu-gpu01-4").inner_text().count("19 % SM") == 1
        assert "allocated" in page.locator("#gpu-gpu02-0").inner_text()
        assert "103" not in page.locator("#overview-live").inner_text()
        screenshot(page, "overview-desktop")
        link = page.locator("a[href='/jobs/102']").first
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_url(f"{base}/jobs/102")
        page.wait_for_selector("#job-chart canvas")  # uPlot drew the per-GPU series
        text = page.locator("main").inner_text()
        assert "87 % reported GPU utilization, 19 % real" in text
        assert "Busy, not computing" in text
        screenshot(page, "job-desktop")
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{base}/")
        screenshot(page, "overview-phone")
        # the live fragment refreshes without a reload (htmx polling every 5 s)
        page.wait_for_timeout(5500)
        assert page.locator("#overview-live").count() == 1


def test_an_old_job_past_retention_says_summarised_and_out_of_retention(
    service: Service, page: Any
) -> None:
    long_ago = utcnow() - timedelta(days=30)
    populate(service.store, now=long_ago, seconds=600)
    ended = {"job_id": "102", "state": "COMPLETED", "end_time": long_ago, "source": "test"}
    service.store.upsert_jobs(pa.Table.from_pylist([ended], schema=JOB_SCHEMA)).result()
    config = UpkeepConfig(raw_retention_days=14, rollup_retention_days=7)
    done = run_upkeep(service.store, config, now=utcnow(), scrape_interval_seconds=15.0)
    assert done.summaries_written == 1 and done.raw_samples_deleted > 0
    cold = cold_dir(service.store.path)  # the raw samples went to Parquet: the site removed it
    assert cold is not None and any(cold.glob("day=*/*.parquet"))
    shutil.rmtree(cold)
    with live_server(create_app(service)) as base:
        login(page, base, "bob", "bob-demo")
        page.goto(f"{base}/jobs/102")
        page.wait_for_selector("#job-chart.out-of-retention")
        text = page.locator("main").inner_text()
        assert "Summarised" in text and "Out of retention" in text
        assert "87 % reported GPU utilization, 19 % real" in text  # from the kept summary
        assert page.locator("#job-chart canvas").count() == 0  # no empty or zero chart
        screenshot(page, "job-out-of-retention")
        page.goto(f"{base}/jobs")
        assert "summarised" in page.locator("main").inner_text()
