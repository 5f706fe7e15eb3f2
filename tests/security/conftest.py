"""A real hpcscope server (uvicorn, the production config) per test, and an HTTP client."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from hpcscope.serve.app import create_app
from hpcscope.serve.server import base_url_scheme, uvicorn_config
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from tests.support.servers import free_port, live_configured_server

Serve = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """``with serve(users, **settings) as base_url:`` a real server (the demo users by
    default)."""

    @contextmanager
    def start(users: UserDirectory | None = None, **overrides: Any) -> Iterator[str]:
        settings = Settings(
            store_path=tmp_path / f"store-{len(list(tmp_path.iterdir()))}.duckdb",
            secret_key="acceptance",
            port=free_port(),
            **overrides,
        )
        service = Service.open(settings, users=users or UserDirectory.demo())
        try:
            config = uvicorn_config(create_app(service), settings)
            with live_configured_server(config):
                yield f"{base_url_scheme(settings)}://{settings.host}:{settings.port}"
        finally:
            service.close()

    return start


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A throw-away certificate for 127.0.0.1 and its key (``openssl`` CLI: the
    ``cryptography`` package is not a dependency)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
