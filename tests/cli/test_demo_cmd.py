"""``hpcscope demo --for``: the README's first command starts, serves, prints, and stops."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.support.servers import free_port

pytestmark = pytest.mark.e2e


def test_demo_serves_prints_logins_and_stops_by_itself(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcscope",
            "demo",
            "--for",
            "15s",  # jobs served ~0.5 s after the server is up (with 8 s a loaded CI missed them)
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "demo"),
            "--no-history",  # the acceptance test (tests/serve/test_demo_first_hour.py) has it
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 25
        body = None
        while time.monotonic() < deadline and body is None:
            try:
                response = httpx2.get(
                    f"http://127.0.0.1:{port}/api/jobs", auth=("carol", "carol-demo"), timeout=2
                )
                if response.status_code == 200 and response.json()["jobs"]:
                    body = response.json()
            except httpx2.HTTPError:
                pass
            if body is None:
                time.sleep(0.2)
        out, err = process.communicate(timeout=40)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert f"http://127.0.0.1:{port}" in out
    # a quiet console: no line per scrape or request (those are DEBUG); the collector's status
    # is one line a minute (tests/service/collect/test_status.py), so 60 s stay under 40 lines
    console = out.splitlines() + err.splitlines()
    assert len(console) <= 40, "\n".join(console)
    assert "HTTP Request" not in err
    assert "/metrics" not in err
    for login in ("alice / alice-demo", "carol / carol-demo", "admin / admin-demo"):
        assert login.replace(" / ", "") in out.replace(" ", "").replace("/", "")
    assert body is not None, "the demo never served jobs"
    assert {job["account"] for job in body["jobs"]} <= {"vision", "nlp"}  # carol's teams
    assert (tmp_path / "demo" / "hpcscope.duckdb").exists()


def test_ctrl_c_while_the_history_is_written_stops_the_demo_at_once(tmp_path: Path) -> None:
    """The month takes ~15 s to write: a Ctrl-C as soon as the pages answer stops the demo
    within a day's chunk of it, not once the month is written."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcscope", "demo", "--port", str(port),
         "--state-dir", str(tmp_path / "demo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        stopped_at = time.monotonic()
        _out, err = process.communicate(timeout=60)
        seconds = time.monotonic() - stopped_at
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130 and "Traceback" not in err, err  # 128 + SIGINT, as a shell
    assert "history stopped after" in err and "history ready" not in err, err
    assert seconds < 8, seconds


def test_demo_json_prints_url_and_logins(tmp_path: Path) -> None:
    import json

    port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcscope",
            "demo",
            "--for",
            "3s",
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "demo"),
            "--json",
            "--no-history",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["url"] == f"http://127.0.0.1:{port}"
    assert {login["user"] for login in document["logins"]} == {
        "alice",
        "bob",
        "dave",
        "carol",
        "admin",
    }
