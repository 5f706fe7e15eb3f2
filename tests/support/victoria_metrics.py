"""A real VictoriaMetrics (Debian ``victoria-metrics``) started by a test, on loopback, in a temp
dir, scraping with its own ``-promscrape.config`` (Prometheus' scrape_configs syntax)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.servers import free_port


@contextlib.contextmanager
def victoria_metrics(config: str, workdir: Path) -> Iterator[str]:
    """Run single-node ``victoria-metrics`` scraping per ``config`` (YAML text); yield its base
    URL (the Prometheus API is under ``/api/v1``). A missing binary fails the test.

    Query results are not cached and points are visible 1 s after ingestion (the defaults,
    a cache and a 30 s latency offset, suit dashboards, not a test that reads what it just
    scraped)."""
    binary = shutil.which("victoria-metrics")
    if binary is None:
        pytest.fail(
            "victoria-metrics not found: install Debian's victoria-metrics (make system-deps)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "scrape.yml").write_text(config)
    port = free_port()
    log = (workdir / "victoria-metrics.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-promscrape.config={workdir / 'scrape.yml'}",
            "-promscrape.fileSDCheckInterval=1s",
            "-search.disableCache",
            "-search.latencyOffset=1s",
            "-loggerLevel=WARN",
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
                tail = (workdir / "victoria-metrics.log").read_text()[-2000:]
                pytest.fail(f"victoria-metrics exited: {tail}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("victoria-metrics not ready in 30 s")
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


@contextlib.contextmanager
def vmalert(rules: list[Path], victoria_metrics_url: str, workdir: Path) -> Iterator[str]:
    """Run Debian's ``vmalert`` (the package of ``victoria-metrics``) evaluating ``rules`` every
    second against VictoriaMetrics and writing the recorded series and ``ALERTS`` back to it;
    yield its base URL. Notifications go to a closed loopback port (nothing listens). A missing
    binary, or a rule file vmalert refuses, fails the test."""
    binary = shutil.which("vmalert")
    if binary is None:
        pytest.fail("vmalert not found: install Debian's victoria-metrics (make system-deps)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = (workdir / "vmalert.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            *(f"-rule={path}" for path in rules),
            f"-datasource.url={victoria_metrics_url}",
            f"-remoteWrite.url={victoria_metrics_url}",
            "-remoteWrite.flushInterval=1s",
            f"-notifier.url=http://127.0.0.1:{free_port()}",
            "-evaluationInterval=1s",
            "-datasource.queryStep=5s",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=ERROR",
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
                pytest.fail(f"vmalert exited: {(workdir / 'vmalert.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("vmalert not ready in 30 s")
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
