"""``hpcscope demo --backend prometheus`` as a real process, every page read in Chromium.

The demo starts the twin, Debian's ``prometheus`` (scraping the twin with the engine recording
rules) and hpcscope with no GPU collector of its own. Every page renders with its figures and
no console error (the ``page`` fixture fails on one); the figures come from the engine (the job
report says ``metrics.backend: prometheus``), and hpcscope scraped no dcgm-exporter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.browser import login, screenshot
from tests.support.processes import start, stop
from tests.support.servers import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.prometheus]

ADMIN = ("admin", "admin-demo")


def _wait_for(condition: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (httpx2.HTTPError, KeyError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("engine-demo")
    port = free_port()
    process, base = start(
        ["demo", "--backend", "prometheus", "--for", "240s", "--port", str(port),
         "--state-dir", str(root), "--scrape-interval", "2", "--no-history"],
        port, root / "demo.log", timeout=90,
    )  # fmt: skip
    try:
        yield base
    finally:
        stop(process)


def _straggler(base: str) -> dict[str, Any] | None:
    body: dict[str, list[dict[str, Any]]] = httpx2.get(
        f"{base}/api/jobs", auth=ADMIN, timeout=30
    ).json()
    job = next((j for j in body["jobs"] if j["name"] == "llama-7b-pretrain"), None)
    if job is None or job["verdict"] != "straggler" or job["metrics"] is None:
        return None
    return job


def _busy_cluster(base: str) -> dict[str, Any] | None:
    """``/api/cluster`` once at least 10 GPUs are active on the engine's samples."""
    cluster: dict[str, Any] = httpx2.get(f"{base}/api/cluster", auth=ADMIN, timeout=30).json()
    return cluster if sum(1 for g in cluster["gpus"] if g["state"] == "active") >= 10 else None


def test_every_page_renders_from_the_engine(demo: str, page: Any) -> None:
    job = _wait_for(lambda: _straggler(demo), "the straggler job read from Prometheus", 120)
    assert job["metrics"]["backend"] == "prometheus"
    assert job["metrics"]["read"] in ("recording_rules", "query_range")
    # the jobs' GPUs turn active as the engine's samples of each reach the read (8 of them when
    # the straggler's verdict first showed, on a loaded machine)
    cluster = _wait_for(lambda: _busy_cluster(demo), "10 GPUs active from Prometheus", 60)
    assert not [t for t in cluster["targets"] if t["exporter"] == "dcgm"]  # no GPU scrape here

    login(page, demo, *ADMIN)
    for path, figure in [
        ("/", "%"),
        ("/jobs", "%"),
        (f"/jobs/{job['job_id']}", "straggler"),
        ("/diagram", "gpu01"),
        ("/chargeback", "GPU-hours"),
        ("/slo", "%"),
        ("/alerts", "Alerts"),
        ("/notify", "otif"),
    ]:
        response = page.goto(f"{demo}{path}")
        assert response is not None and response.status == 200, path
        page.wait_for_load_state("networkidle")
        assert figure in page.content(), path
        screenshot(page, f"engine-demo{path.replace('/', '-') or '-overview'}")
    # the job page's chart reads the engine too
    series = httpx2.get(
        f"{demo}/api/jobs/{job['job_id']}/timeseries", auth=ADMIN, timeout=30
    ).json()
    assert series["metrics"]["backend"] == "prometheus" and series["series"]
