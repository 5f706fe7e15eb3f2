"""Start Debian's ``prometheus`` next to the twin: the engine of ``hpcscope demo --backend
prometheus`` and of ``bench/read_path.py --backend prometheus``.

It scrapes the twin's dcgm-exporter targets (its ``targets.json``, file_sd, ``exporter="dcgm"``)
and evaluates the engine recording rules (``hpcscope deploy prometheus-rules``, for the scrape
interval given). Its data lives in a directory of its own; it stops with the block.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from hpcscope.model.errors import HpcscopeError
from hpcscope.service.backends.engine_rules import engine_rules_yaml

__all__ = ["EngineNotStarted", "prometheus_config", "run_prometheus"]


class EngineNotStarted(HpcscopeError, RuntimeError):
    """Prometheus is not installed, or did not start (its log's tail is in the message)."""


def prometheus_config(
    targets: Path, rules: Path, *, scrape_interval_seconds: int, window_seconds: int
) -> str:
    """A Prometheus configuration scraping the twin's dcgm targets with the engine rules."""
    return (
        f"global: {{scrape_interval: {scrape_interval_seconds}s, "
        f"scrape_timeout: {min(scrape_interval_seconds, 10)}s, "
        f"evaluation_interval: {window_seconds}s}}\n"
        f"rule_files: ['{rules}']\n"
        "scrape_configs:\n"
        "  - job_name: dcgm\n"
        f'    file_sd_configs: [{{files: ["{targets}"]}}]\n'
        "    relabel_configs:\n"
        "      - {source_labels: [exporter], regex: dcgm, action: keep}\n"
    )


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def run_prometheus(
    workdir: Path,
    *,
    targets: Path,
    scrape_interval_seconds: int,
    window_seconds: int = 60,
    delay_seconds: int | None = None,
    port: int = 0,
    ready_seconds: float = 60.0,
) -> Iterator[str]:
    """Run ``prometheus`` in ``workdir`` on loopback; yield its base URL.

    Raises:
        EngineNotStarted: no ``prometheus`` on the PATH, or it exited or was not ready.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        raise EngineNotStarted(
            "prometheus not found: install Debian's prometheus (scripts/install-system-deps.sh)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    rules = workdir / "hpcscope-engine-rules.yml"
    rules.write_text(
        engine_rules_yaml(
            scrape_interval_seconds=scrape_interval_seconds,
            window_seconds=window_seconds,
            delay_seconds=delay_seconds,
        )
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        prometheus_config(
            targets,
            rules,
            scrape_interval_seconds=scrape_interval_seconds,
            window_seconds=window_seconds,
        )
    )
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + ready_seconds
            while True:
                if process.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise EngineNotStarted(f"prometheus exited: {tail}")
                with contextlib.suppress(httpx2.HTTPError):
                    if httpx2.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise EngineNotStarted(f"prometheus not ready in {ready_seconds:.0f} s")
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
