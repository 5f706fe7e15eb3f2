"""The first hour of a new user, on the real demo: ``hpcscope demo`` as a process, read in
Chromium and through its API.

One demo process for the module (its history included): the browser test opens it as alice,
carol and admin once the history is written and finds a month on ``/chargeback`` (the current
month and the trend), ``/slo`` (each SLO with valid events and its 30 daily bars) and
``/alerts``, and no collector "not configured" in the diagram's panel; screenshots go to
``test-artifacts/screenshots/first-hour-*.png``. The slow test waits until the twin's scripted
incidents (one per threat vector, all in the first 45 seconds of each 10-minute cycle, counted
from the first poll of the twin's job list, once the history is written) are open alerts on
``/api/diagram`` and ``/api/alerts``, each incident's rule among them (so each sensor format
was read), and records how long that took in ``test-artifacts/first-hour-vectors.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hpcscope.model.alerts import VECTOR_NAMES, Vector
from hpcscope.twin.live_incidents import SCHEDULE
from tests.support.browser import login, screenshot
from tests.support.paths import ARTIFACTS
from tests.support.servers import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("demo-first-hour")]

PASSWORDS = {"alice": "alice-demo", "carol": "carol-demo", "admin": "admin-demo"}
VECTORS = sorted(VECTOR_NAMES.values())
#: the rules the twin's incidents raise: Falco, Tetragon (and the bpftrace sensor), InfiniBand
#: counters, Lustre job_stats and the integrity spool
PLAYED = {planned.rule for planned in SCHEDULE}


@dataclass(frozen=True, slots=True)
class Demo:
    url: str
    started: datetime  # UTC, naive: when the process was launched
    started_monotonic: float
    log: Path


def _wait_for(check: Callable[[], Any], what: str, seconds: float, log: Path) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx2.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root: Path = tmp_path_factory.mktemp("first-hour")
    port = free_port()
    log_path = root / "demo.log"
    started = datetime.now(UTC).replace(tzinfo=None)
    started_monotonic = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hpcscope", "demo", "--for", "660s", "--port", str(port),
             "--state-dir", str(root)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        # the URL and logins first, then the server, then the month written into the store
        logins = re.compile(r"admin\s+/\s+admin-demo")
        _wait_for(lambda: logins.search(log_path.read_text()), "the logins", 30, log_path)
        _wait_for(
            lambda: httpx2.get(f"{url}/healthz", timeout=2).status_code == 200,
            "the server",
            60,
            log_path,
        )
        _wait_for(lambda: "history ready" in log_path.read_text(), "the history", 120, log_path)
        yield Demo(url, started, started_monotonic, log_path)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _number(text: str) -> float:
    """The first number of ``text`` (``1,234.5 GPU-h`` -> 1234.5); 0 when there is none."""
    found = re.search(r"-?[\d,]*\.?\d+", text)
    return float(found.group(0).replace(",", "")) if found else 0.0


@pytest.mark.browser
def test_a_month_at_first_open_as_alice_carol_and_admin(demo: Demo, page: Any) -> None:
    for user, password in PASSWORDS.items():
        login(page, demo.url, user, password)
        page.goto(f"{demo.url}/chargeback")
        totals = page.locator("#totals").inner_text()
        assert "No finished job" not in page.locator("main").inner_text(), user
        assert _number(totals.split("Allocated")[1]) > 0, (user, totals)  # the current month
        trend = [_number(c.inner_text()) for c in page.locator("#trend tfoot td").all()]
        assert len(trend) == 6 and sum(1 for t in trend if t > 0) >= 2, (user, trend)
        screenshot(page, f"first-hour-{user}-chargeback")
        page.goto(f"{demo.url}/slo")
        for slo in ("queue_wait", "job_success", "gpu_efficiency"):
            section = page.locator(f"#slo-{slo}")
            good_valid = section.locator("dt:text('Good / valid events') + dd").inner_text()
            assert _number(good_valid.split("/")[1]) > 0, (user, slo, good_valid)
            bars = section.locator(".slo-history rect").count()
            # a researcher's quiet day may have no event (no bar): her nightly job makes one
            assert bars == 30, (user, slo, bars)
        screenshot(page, f"first-hour-{user}-slo")
        page.goto(f"{demo.url}/alerts")
        rows = page.locator("#alerts tbody tr")
        assert rows.count() > 0 and "No alert" not in rows.first.inner_text(), user
        screenshot(page, f"first-hour-{user}-alerts")
        page.context.clear_cookies()
    login(page, demo.url, "admin", PASSWORDS["admin"])
    page.goto(f"{demo.url}/diagram")
    panel = page.locator("section[aria-labelledby=collectors-heading]").inner_text()
    assert "not configured" not in panel, panel
    assert panel.count("last event") >= 6, panel
    # the sensors' files are there from the start: Tetragon's tail and the eBPF sensor's work
    for collector in ("Tetragon → node", "eBPF on checkpoints → weights"):
        status = re.search(re.escape(collector) + r" \(([a-z ]+)", panel)
        assert status is not None and status.group(1).strip() == "ok", (collector, panel)
    screenshot(page, "first-hour-collectors")


def _open_live_vectors(demo: Demo) -> dict[str, Any] | None:
    """The diagram's open alerts by vector, when every vector has one raised since the start."""
    auth = ("admin", PASSWORDS["admin"])
    diagram = httpx2.get(f"{demo.url}/api/diagram", auth=auth, timeout=30).json()
    by_vector = diagram["detections"]["open_by_vector"] or {}
    alerts = httpx2.get(f"{demo.url}/api/alerts?state=open", auth=auth, timeout=30).json()
    since = demo.started.isoformat()
    recent = [a for a in alerts["alerts"] if a["vector"] and a["last_seen"].rstrip("Z") >= since]
    live = {VECTOR_NAMES[Vector(a["vector"])] for a in recent}
    # each incident through its own sensor's format: the rule that reads that format fired
    rules = {a["rule_id"] for a in recent}
    if all(by_vector.get(v, 0) > 0 for v in VECTORS) and set(VECTORS) <= live and rules >= PLAYED:
        return by_vector
    return None


@pytest.mark.slow
def test_every_vector_is_open_within_ten_minutes_of_the_start(demo: Demo) -> None:
    """Slow (a few minutes): the twin's incidents of the first cycle, one per vector."""
    left = 600 - (time.monotonic() - demo.started_monotonic)
    by_vector = _wait_for(lambda: _open_live_vectors(demo), "six open vectors", left, demo.log)
    seconds = time.monotonic() - demo.started_monotonic
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "first-hour-vectors.json").write_text(
        json.dumps(
            {
                "seconds_after_start": round(seconds, 1),
                "open_by_vector": by_vector,
                "rules": sorted(PLAYED),
            }
        )
    )
    assert seconds <= 600
