"""Real loopback HTTP servers that behave like exporters: good ones and broken ones.

``loopback_exporters`` starts an ``asyncio`` TCP server on 127.0.0.1 in the test's own event
loop; each path answers with one behaviour, written at the byte level so a test can hang, close
a connection mid-body or lie about the length, as real broken exporters and proxies do.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

Writer = asyncio.StreamWriter
Behaviour = Callable[[Writer], Awaitable[None]]

TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"


def _head(status: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def page(
    text: str | bytes,
    *,
    content_type: str = TEXT_0_0_4,
    gzipped: bool = False,
    chunked: bool = False,
    delay_seconds: float = 0.0,
) -> Behaviour:
    """A 200 answer with ``text``, optionally gzip-encoded or chunked, after a delay."""
    body = text.encode() if isinstance(text, str) else text

    async def answer(writer: Writer) -> None:
        if delay_seconds:
            await asyncio.sleep(delay_seconds)
        payload = gzip.compress(body) if gzipped else body
        headers = {"Content-Type": content_type}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
            writer.write(_head("200 OK", headers))
            for start in range(0, len(payload), 4096):
                chunk = payload[start : start + 4096]
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            writer.write(b"0\r\n\r\n")
        else:
            headers["Content-Length"] = str(len(payload))
            writer.write(_head("200 OK", headers) + payload)
        await writer.drain()

    return answer


def status(code: int, reason: str, body: str = "") -> Behaviour:
    async def answer(writer: Writer) -> None:
        data = body.encode()
        headers = {"Content-Type": "text/plain", "Content-Length": str(len(data))}
        writer.write(_head(f"{code} {reason}", headers) + data)
        await writer.drain()

    return answer


def hang() -> Behaviour:
    """Accept the request, never answer."""

    async def answer(writer: Writer) -> None:
        await asyncio.sleep(3600)

    return answer


def close_mid_body(text: str, *, sent_bytes: int) -> Behaviour:
    """Announce the whole page, send ``sent_bytes`` of it, then close the connection."""

    async def answer(writer: Writer) -> None:
        body = text.encode()
        headers = {"Content-Type": TEXT_0_0_4, "Content-Length": str(len(body))}
        writer.write(_head("200 OK", headers) + body[:sent_bytes])
        await writer.drain()

    return answer


def trickle(text: str, *, bytes_per_write: int, pause_seconds: float) -> Behaviour:
    """Send the page slowly: headers at once, then the body a few bytes at a time."""

    async def answer(writer: Writer) -> None:
        body = text.encode()
        headers = {"Content-Type": TEXT_0_0_4, "Content-Length": str(len(body))}
        writer.write(_head("200 OK", headers))
        for start in range(0, len(body), bytes_per_write):
            writer.write(body[start : start + bytes_per_write])
            await writer.drain()
            await asyncio.sleep(pause_seconds)

    return answer


@dataclass
class ExporterStats:
    """What the servers saw: requests per path, and the most connections open at once."""

    requests: dict[str, int] = field(default_factory=dict)
    accept_headers: list[str] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0


@asynccontextmanager
async def loopback_exporters(
    routes: Mapping[str, Behaviour],
) -> AsyncIterator[tuple[str, ExporterStats]]:
    """Serve ``routes`` (path -> behaviour) on a free loopback port; yield base URL and stats."""
    stats = ExporterStats()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: Writer) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        stats.in_flight += 1
        stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = request.decode("latin-1").split("\r\n")
            path = request_line.split(" ")[1]
            stats.requests[path] = stats.requests.get(path, 0) + 1
            for line in header_lines:
                if line.lower().startswith("accept:"):
                    stats.accept_headers.append(line.split(":", 1)[1].strip())
            behaviour = routes.get(path) or status(404, "Not Found", "no such page")
            await behaviour(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the server is shutting down; end quietly (asyncio logs cancelled handlers)
        finally:
            stats.in_flight -= 1
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", stats
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


def refused_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
