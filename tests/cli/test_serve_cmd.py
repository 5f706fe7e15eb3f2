"""``hpcscope serve`` TLS flags: both files or neither, refused before anything starts."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.cli.output import EXIT_USAGE_ERROR


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
