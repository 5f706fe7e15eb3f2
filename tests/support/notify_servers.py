"""Real receivers for notification tests: an SMTP server (aiosmtpd), a webhook (an HTTP server
recording POSTs) and a real Alertmanager (Debian ``prometheus-alertmanager``), each started by
the test on a free loopback port and stopped at the end. A missing component fails the test.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.support.servers import free_port


@dataclass
class Mailbox:
    """What the SMTP server received: (envelope recipients, parsed message) per mail."""

    host: str
    port: int
    mails: list[tuple[list[str], Message]] = field(default_factory=list)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        content = envelope.content if isinstance(envelope.content, bytes) else b""
        self.mails.append((list(envelope.rcpt_tos), message_from_bytes(content)))
        return "250 Message accepted for delivery"


def text_of(mail: Message) -> str:
    """The plain-text body of a received mail, transfer encoding undone."""
    payload = mail.get_payload(decode=True)
    return payload.decode() if isinstance(payload, bytes) else str(payload)


@contextlib.contextmanager
def smtp_server() -> Iterator[Mailbox]:
    """A real SMTP server on 127.0.0.1 (aiosmtpd's threaded controller)."""
    port = free_port()
    box = Mailbox("127.0.0.1", port)
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class Webhook:
    """The POSTs the webhook received (parsed JSON), and the status it answers with."""

    url: str
    posts: list[Any] = field(default_factory=list)
    status: int = 200


@contextlib.contextmanager
def webhook_server() -> Iterator[Webhook]:
    """An HTTP server on 127.0.0.1 that records every POSTed JSON body."""
    port = free_port()
    hook = Webhook(f"http://127.0.0.1:{port}/hook")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            hook.posts.append(json.loads(self.rfile.read(length) or b"null"))
            self.send_response(hook.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class AlertmanagerUnavailable(RuntimeError):
    """prometheus-alertmanager is not installed (scripts/install-system-deps.sh)."""


def alertmanager_binary() -> str:
    for name in ("prometheus-alertmanager", "alertmanager"):
        found = shutil.which(name)
        if found:
            return found
    raise AlertmanagerUnavailable("prometheus-alertmanager not installed")


def amtool_binary() -> str:
    found = shutil.which("amtool")
    if found is None:
        raise AlertmanagerUnavailable("amtool not installed (Debian prometheus-alertmanager)")
    return found


@dataclass
class Alertmanager:
    url: str
    log: Path

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (active, silenced, inhibited, unprocessed: not resolved)."""
        response = httpx2.get(f"{self.url}/api/v2/alerts", params=filters, timeout=10)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()
        return found


@contextlib.contextmanager
def alertmanager(directory: Path, config_text: str) -> Iterator[Alertmanager]:
    """A real Alertmanager with ``config_text`` (storage, log under ``directory``), no cluster."""
    binary = alertmanager_binary()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "alertmanager.yml"
    config.write_text(config_text)
    port = free_port()
    log = directory / "alertmanager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=debug",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"alertmanager not ready: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Alertmanager(url, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(predicate: Any, *, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``predicate()`` until true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met after {timeout}s")
        time.sleep(0.1)
