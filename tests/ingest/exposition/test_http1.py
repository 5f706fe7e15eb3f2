"""The scraper's HTTP/1.1 client against a real loopback server written at the byte level."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from hpcscope.ingest.exposition.http1 import FastClient, HttpFailure
from tests.support.aio import run_async

Answer = Callable[[bytes], bytes | None]
"""Request head -> the bytes to send back (None: close without answering)."""


@dataclass
class Served:
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)


@asynccontextmanager
async def server(
    answer: Answer, *, close_after: int | None = None
) -> AsyncIterator[tuple[str, Served]]:
    """A loopback server: each request head gets ``answer(head)``; a connection is closed
    after ``close_after`` answers (None: kept open)."""
    served = Served()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.connections += 1
        answered = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                served.requests.append(head)
                data = answer(head)
                if data is None:
                    return
                writer.write(data)
                await writer.drain()
                answered += 1
                if close_after is not None and answered >= close_after:
                    return
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        listener.close()
        await listener.wait_closed()


def ok(body: bytes, *extra: str) -> bytes:
    headers = [f"Content-Length: {len(body)}", "Content-Type: text/plain", *extra]
    return ("HTTP/1.1 200 OK\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n").encode() + body


def client(max_body_bytes: int = 1 << 20) -> FastClient:
    return FastClient({"Accept": "text/plain", "User-Agent": "test"}, max_body_bytes=max_body_bytes)


def test_one_kept_alive_connection_serves_every_scrape() -> None:
    async def run() -> tuple[list[bytes], Served, list[int]]:
        statuses: list[int] = []
        async with server(lambda head: ok(b"up 1\n")) as (base, served):
            fast = client()
            bodies = [(await fast.get(f"{base}/metrics", statuses.append)).body for _ in range(5)]
            fast.close()
        return bodies, served, statuses

    bodies, served, statuses = run_async(run())
    assert bodies == [b"up 1\n"] * 5
    assert served.connections == 1
    assert statuses == [200] * 5
    head = served.requests[0].decode()
    assert head.startswith("GET /metrics HTTP/1.1\r\n")
    assert "Host: 127.0.0.1:" in head and "Accept: text/plain\r\n" in head
    assert "Accept-Encoding: gzip\r\n" in head


def test_chunked_gzip_and_trailers() -> None:
    page = b"".join(b"metric_%d 1\n" % i for i in range(3000))
    packed = gzip.compress(page)
    chunks = [packed[i : i + 1000] for i in range(0, len(packed), 1000)]
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-T: 1\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"

    async def run() -> tuple[bytes, bytes, int]:
        async with server(lambda _: head + body) as (base, served):
            fast = client()
            first = (await fast.get(base, lambda _: None)).body
            second = (await fast.get(base, lambda _: None)).body
            fast.close()
        return first, second, served.connections

    first, second, connections = run_async(run())
    assert first == second == page
    assert connections == 1


def test_connection_close_and_http_1_0_bodies_read_to_the_end() -> None:
    answers = iter(
        [
            ok(b"a 1\n", "Connection: close"),
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nb 2\n",
        ]
    )

    async def run() -> tuple[list[bytes], int]:
        async with server(lambda _: next(answers), close_after=1) as (base, served):
            fast = client()
            bodies = [(await fast.get(base, lambda _: None)).body for _ in range(2)]
            fast.close()
        return bodies, served.connections

    bodies, connections = run_async(run())
    assert bodies == [b"a 1\n", b"b 2\n"]
    assert connections == 2


def test_a_kept_alive_connection_closed_by_the_server_is_replaced() -> None:
    async def run() -> tuple[list[bytes], int]:
        async with server(lambda _: ok(b"x 1\n"), close_after=1) as (base, served):
            fast = client()
            bodies = []
            for _ in range(3):
                bodies.append((await fast.get(base, lambda _: None)).body)
                await asyncio.sleep(0.05)  # the server has closed the idle connection
            fast.close()
        return bodies, served.connections

    bodies, connections = run_async(run())
    assert bodies == [b"x 1\n"] * 3
    assert connections == 3


def test_redirects_are_followed_up_to_five() -> None:
    def answer(head: bytes) -> bytes:
        path = head.split(b" ")[1]
        if path.startswith(b"/hop"):  # /hop6 is the last hop, then /end
            hop = int(path[4:])
            to = f"/hop{hop + 1}" if hop < 6 else "/end"
            return f"HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n".encode()
        return ok(b"end 1\n")

    async def run() -> tuple[bytes, str]:
        async with server(answer) as (base, _):
            fast = client()
            short = (await fast.get(f"{base}/hop3", lambda _: None)).body
            with pytest.raises(HttpFailure) as failure:
                await fast.get(f"{base}/hop0", lambda _: None)
            fast.close()
        return short, str(failure.value)

    short, error = run_async(run())
    assert short == b"end 1\n"  # 4 redirects; from /hop0 there are 7
    assert error == "too many redirects: more than 5"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.x response: 'SSH-2.0-OpenSSH_9.2'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", "malformed Content-Length '12x'"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: br\r\n\r\n", "unsupported Transfer-Encoding 'br'"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "malformed chunk size b'zz'",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", "body too large: Content-Length"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope",
            "cannot decode the gzip body",
        ),
    ],
)
def test_what_it_cannot_read_is_a_failure_with_a_reason(reply: bytes, message: str) -> None:
    async def run() -> str:
        async with server(lambda _: reply, close_after=1) as (base, _):
            fast = client(max_body_bytes=1000)
            with pytest.raises(HttpFailure) as failure:
                await fast.get(base, lambda _: None)
            fast.close()
        return str(failure.value)

    assert run_async(run()).startswith(message)


def test_only_plain_http_without_credentials_is_handled() -> None:
    assert FastClient.handles("http://10.0.0.1:9400/metrics")
    assert FastClient.handles("http://[::1]:9400/metrics")
    assert not FastClient.handles("https://gpu01:9400/metrics")
    assert not FastClient.handles("http://user:secret@gpu01:9400/metrics")
