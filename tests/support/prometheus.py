"""A real Prometheus (Debian ``prometheus``) started by a test, on loopback, in a temp dir."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.servers import free_port


@contextlib.contextmanager
def prometheus(config: str, workdir: Path) -> Iterator[str]:
    """Run ``prometheus`` with ``config`` (YAML text, relative paths from ``workdir``); yield
    its base URL. A missing binary fails the test."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: install Debian's prometheus (make system-deps)")
    (workdir / "prometheus.yml").write_text(config)
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            "--config.file=prometheus.yml",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("prometheus not ready in 30 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """Instant query; raises AssertionError with Prometheus' error when it fails."""
    body = httpx2.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", f"{expr}: {body.get('error')}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
