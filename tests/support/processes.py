"""Real hpcscope processes for fault tests: spawn, wait, stop, kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

#: Environment of a server whose live read views are recomputed at every collector cycle
#: (``snapshot_min_refresh_seconds``), as they are without a collector.
FRESH_VIEWS = {"HPCSCOPE_SNAPSHOT_MIN_REFRESH_SECONDS": "0"}

#: The demo admin of a fresh store.
ADMIN = ("admin", "admin-demo")


def spawn(
    args: list[str], log: Path, *, module: str = "hpcscope", env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m <module> <args>`` in its own session, output appended to ``log``.

    The server's live views follow each collector cycle (:data:`FRESH_VIEWS`) unless ``env``
    says otherwise: a test that waits for what the server shows does not wait out the pages'
    5-second refresh floor at each step."""
    env = {**FRESH_VIEWS, **(env or os.environ), "PYTHONUNBUFFERED": "1"}
    env["HPCSCOPE_LOG_LEVEL"] = "INFO"
    with log.open("ab") as handle:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (a clean stop), SIGKILL after 20 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def kill9(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group: no handler runs, nothing is flushed."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def start(
    args: list[str],
    port: int,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 90.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """``hpcscope <args>`` serving on ``port`` (``serve``, ``demo``); returns once
    ``/healthz`` answers, and fails with the process's log if it exits first."""
    process = spawn(args, log, env=env)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError(
                f"hpcscope {args[0]} exited {process.returncode}: {log.read_text()}"
            )
        try:
            return httpx2.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    try:
        wait_for(up, f"hpcscope {args[0]}", timeout=timeout)
    except BaseException:
        stop(process)
        raise
    return process, base


def serve(
    store: Path, port: int, log: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``hpcscope serve`` on a real store file; returns once ``/healthz`` answers."""
    return start(["serve", "--store", str(store), "--port", str(port), *extra], port, log, env=env)


def api(base: str, path: str) -> Any:
    """GET ``path`` as the admin, JSON."""
    response = httpx2.get(f"{base}{path}", auth=ADMIN, timeout=30)
    response.raise_for_status()
    return response.json()
