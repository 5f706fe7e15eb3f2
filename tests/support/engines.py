"""Real engine front doors started by a test: VictoriaMetrics behind ``vmauth`` (bearer and basic
authentication), a VictoriaMetrics answering at a cluster-shaped URL, a Prometheus requiring a
client certificate; and the throw-away TLS material they need (the ``openssl`` CLI: the
``cryptography`` package is not a dependency). A missing binary fails the test."""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from tests.support.servers import free_port


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: install Debian's prometheus and victoria-metrics")
    return path


@contextlib.contextmanager
def running(
    argv: Sequence[str], workdir: Path, *, ready: Callable[[], bool], name: str
) -> Iterator[None]:
    """Run ``argv`` in ``workdir`` until the block ends; wait (30 s) until ``ready()``."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(list(argv), cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"{name} exited: {log_path.read_text()[-2000:]}")
            with contextlib.suppress(httpx2.HTTPError, OSError):
                if ready():
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"{name} not ready in 30 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _answers(url: str, **kwargs: object) -> bool:
    return httpx2.get(url, timeout=1, **kwargs).status_code == 200  # type: ignore[arg-type]


@contextlib.contextmanager
def bare_victoria_metrics(workdir: Path, *, path_prefix: str = "") -> Iterator[str]:
    """A single-node VictoriaMetrics without scraping; ``path_prefix`` (``/select/0``) makes
    its API answer at a cluster's URL (``<url>/select/0/prometheus/api/v1/...``). Yields the
    base URL (without the prefix)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        _binary("victoria-metrics"),
        f"-storageDataPath={workdir / 'data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-search.disableCache",
        "-search.latencyOffset=0s",
        "-loggerLevel=WARN",
    ]
    if path_prefix:
        argv.append(f"-http.pathPrefix={path_prefix}")
    with running(
        argv, workdir, ready=lambda: _answers(f"{url}{path_prefix}/health"), name="victoria-metrics"
    ):
        yield url


@contextlib.contextmanager
def vmauth(
    backend_url: str, workdir: Path, *, token: str, user: str, password: str
) -> Iterator[str]:
    """``vmauth`` in front of ``backend_url``: one user by bearer ``token``, one by basic
    ``user``/``password``; anything else gets 401. Yields its URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "auth.yml"
    config.write_text(
        "users:\n"
        f'  - bearer_token: "{token}"\n    url_prefix: "{backend_url}"\n'
        f'  - username: "{user}"\n    password: "{password}"\n    url_prefix: "{backend_url}"\n'
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        _binary("vmauth"),
        f"-auth.config={config}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-loggerLevel=WARN",
    ]
    with running(argv, workdir, ready=lambda: _answers(f"{url}/health"), name="vmauth"):
        yield url


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


def tls_files(workdir: Path) -> TlsFiles:
    """Make :class:`TlsFiles` in ``workdir`` (1-day validity)."""
    workdir.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.pem", cwd=workdir,
    )  # fmt: skip
    for name, extension in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (workdir / f"{name}.ext").write_text(extension + "\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=workdir,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
            cwd=workdir,
        )  # fmt: skip
    return TlsFiles(
        ca=workdir / "ca.pem",
        server_cert=workdir / "server.pem",
        server_key=workdir / "server.key",
        client_cert=workdir / "client.pem",
        client_key=workdir / "client.key",
    )


@contextlib.contextmanager
def prometheus_requiring_client_certificates(workdir: Path, tls: TlsFiles) -> Iterator[str]:
    """A real Prometheus serving HTTPS only to clients with a certificate of ``tls.ca``; yields
    its ``https://`` URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    (workdir / "web.yml").write_text(
        "tls_server_config:\n"
        f"  cert_file: {tls.server_cert}\n  key_file: {tls.server_key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {tls.ca}\n"
    )
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(tls.ca))
    context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    argv = [
        _binary("prometheus"),
        "--config.file=prometheus.yml",
        "--web.config.file=web.yml",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with running(
        argv, workdir, ready=lambda: _answers(f"{url}/-/ready", verify=context), name="prometheus"
    ):
        yield url
