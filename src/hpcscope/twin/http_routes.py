"""The twin's HTTP endpoints on loopback: GET routes (exporter pages, slurmrestd) and POST or
DELETE actions (slurmrestd's cancel, a chat webhook), one thread per server."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

log = logging.getLogger(__name__)

Route = Callable[[], tuple[int, str, bytes]]
Action = Callable[[str, bytes], tuple[int, str, bytes]]
"""A POST or DELETE endpoint: (path, body) -> status, content type, body."""


class Server(ThreadingHTTPServer):
    """A threaded HTTP server whose clients may go away (a scraper's timeout)."""

    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a scraper that gives up (timeout) closes the socket: not an error of the twin
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log.debug("twin http: client %s went away (%s)", client_address, error)
            return
        super().handle_error(request, client_address)


def serve_routes(
    host: str, port: int, routes: dict[str, Route], actions: dict[str, Action] | None = None
) -> tuple[Server, threading.Thread]:
    """Serve GET ``routes`` (path -> callable returning status, content type, body) and POST
    and DELETE ``actions`` (``"METHOD /path/prefix"`` -> callable of the path and body)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self._answer((404, "text/plain", b"not found\n"))
            else:
                self._answer(self._run(lambda: route()))

        def do_POST(self) -> None:
            self._act("POST")

        def do_DELETE(self) -> None:
            self._act("DELETE")

        def _act(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            for key, action in (actions or {}).items():
                wanted, prefix = key.split(" ", 1)
                if wanted == method and path.startswith(prefix):
                    self._answer(self._run(partial(action, path, body)))
                    return
            self._answer((404, "text/plain", b"not found\n"))

        def _run(self, call: Callable[[], tuple[int, str, bytes]]) -> tuple[int, str, bytes]:
            try:
                return call()
            except Exception as exc:  # an endpoint bug must not kill the server
                log.exception("twin endpoint %s failed", self.path)
                return 500, "text/plain", f"{exc}\n".encode()

        def _answer(self, answer: tuple[int, str, bytes]) -> None:
            status, content_type, body = answer
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("twin http %s", format % args)

    server = Server((host, port), Handler)
    # shutdown() waits for the serve loop's next poll: 0.1 s, not the default 0.5 s per server
    thread = threading.Thread(
        target=server.serve_forever, args=(0.1,), name=f"twin-http-{port}", daemon=True
    )
    thread.start()
    return server, thread


class Collectable(Protocol):
    """An exporter behind a page: advances its state and renders the page."""

    def collect(self) -> str: ...


def metrics_route(endpoint: Collectable) -> Route:
    """``GET /metrics`` for an exporter: its page in the Prometheus text format."""

    def route() -> tuple[int, str, bytes]:
        return 200, "text/plain; version=0.0.4; charset=utf-8", endpoint.collect().encode()

    return route
