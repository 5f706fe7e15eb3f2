"""The README's screenshots, taken from the running demo (``make screenshots``).

Starts ``hpcscope demo`` (history included) on a free port in a scratch directory, waits until
the straggler job (``llama-7b-pretrain``) has a captured window naming its straggler and until
the twin's incidents have opened an alert on every threat vector (the first 90 seconds of
collection), then drives Debian's chromium (Playwright) as ``admin``:

* ``docs/img/straggler-job.png``: the straggler's job page;
* ``docs/img/threats-mode.png``: the cluster diagram in Threats mode.

About four minutes. ``--out DIR`` writes elsewhere (the default is the README's ``docs/img``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parents[1]
ADMIN = ("admin", "admin-demo")
CHROMIUM = Path(os.environ.get("HPCSCOPE_CHROMIUM", "/usr/bin/chromium"))
VECTORS = 6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: Callable[[], Any], what: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = check()
        except (httpx2.HTTPError, KeyError, ValueError):
            found = None
        if found:
            return found
        time.sleep(1.0)
    raise SystemExit(f"readme_screenshots: timed out waiting for {what}")


def _straggler(url: str) -> str | None:
    """The live straggler job's id once a capture window names its straggler."""
    jobs = httpx2.get(f"{url}/api/jobs", auth=ADMIN, timeout=30).json()["jobs"]
    for job in jobs:
        if job["name"] == "llama-7b-pretrain" and job["state"] == "RUNNING":
            phases = httpx2.get(f"{url}/api/jobs/{job['job_id']}/phases", auth=ADMIN, timeout=30)
            windows = phases.json().get("windows") or []
            if windows and windows[0].get("straggler"):
                return str(job["job_id"])
    return None


def _six_vectors(url: str) -> bool:
    diagram = httpx2.get(f"{url}/api/diagram", auth=ADMIN, timeout=30).json()
    by_vector = diagram["detections"]["open_by_vector"] or {}
    return sum(1 for count in by_vector.values() if count > 0) >= VECTORS


def shoot(url: str, job_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_context(viewport={"width": 1366, "height": 1000}).new_page()
        page.goto(f"{url}/login")
        page.fill("#username", ADMIN[0])
        page.fill("#password", ADMIN[1])
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        page.goto(f"{url}/jobs/{job_id}")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(out / "straggler-job.png"), full_page=False)
        page.goto(f"{url}/diagram?mode=threats")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(out / "threats-mode.png"), full_page=False)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "demo.log"
        with log.open("wb") as handle:
            demo = subprocess.Popen(
                [sys.executable, "-m", "hpcscope", "demo", "--port", str(port), "--for", "900s",
                 "--state-dir", str(Path(scratch) / "demo")],
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            up = lambda: httpx2.get(f"{url}/healthz", timeout=2).status_code == 200  # noqa: E731
            _wait(up, "the demo", 90)
            _wait(lambda: "history ready" in log.read_text(), "the history", 120)
            job_id = _wait(lambda: _straggler(url), "the straggler's captured phases", 300)
            _wait(lambda: _six_vectors(url), "an open alert on every vector", 600)
            shoot(url, job_id, args.out)
        finally:
            os.killpg(demo.pid, signal.SIGINT)
            demo.wait(timeout=60)
    print(f"readme_screenshots: {args.out / 'straggler-job.png'}, {args.out / 'threats-mode.png'}")


if __name__ == "__main__":
    main()
