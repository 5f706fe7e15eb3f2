"""``hpcscope serve``: TLS flags (both files or neither, refused before anything starts), the
URL it announces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.cli.output import EXIT_USAGE_ERROR
from tests.support.processes import spawn, stop, wait_for


def test_a_certificate_without_its_key_is_a_usage_error(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("not read: refused before")
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--store",
            str(tmp_path / "s.duckdb"),
            "--tls-certfile",
            str(cert),
            "--for",
            "1s",
        ],
    )
    assert result.exit_code == EXIT_USAGE_ERROR
    assert "tls_certfile and tls_keyfile go together" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "s.duckdb").exists()


#: ``--json``'s announcement, as printed (indented or not).
ANNOUNCED = re.compile(r'\{\s*"url":\s*"[^"]+"\s*\}')


def test_port_0_announces_the_port_the_kernel_chose(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    process = spawn(
        ["serve", "--store", str(tmp_path / "s.duckdb"), "--port", "0", "--json", "--for", "60s"],
        log,
    )
    try:
        found = wait_for(lambda: ANNOUNCED.search(log.read_text()), "the announced URL")
        url = json.loads(found.group(0))["url"]
        port = int(url.rsplit(":", 1)[1])
        assert port != 0, url
        assert httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        stop(process)
