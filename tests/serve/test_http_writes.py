"""One write per response (``serve/http_writes.py``): the same bytes on the wire as uvicorn's
own httptools protocol, for every kind of response, in one transport write each."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hpcscope.serve.http_writes import OneWriteProtocol
from hpcscope.serve.server import uvicorn_config
from hpcscope.service.settings import Settings


async def _document(request: Request) -> Response:
    if request.headers.get("if-none-match") == '"v1"':
        return Response(status_code=304, headers={"ETag": '"v1"'})
    return JSONResponse({"job": "101", "text": "x" * 3000}, headers={"ETag": '"v1"'})


async def _stream(request: Request) -> Response:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one,", b"two,", b"three"):
            yield part

    return StreamingResponse(parts(), media_type="text/plain")


async def _echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


async def _fails(request: Request) -> Response:
    raise RuntimeError("boom")


APP = Starlette(
    routes=[
        Route("/doc", _document, methods=["GET", "HEAD"]),
        Route("/stream", _stream),
        Route("/echo", _echo, methods=["POST"]),
        Route("/fails", _fails),
    ]
)

#: Requests sent on one connection, and whether the connection stays open after the answer.
REQUESTS = [
    b"GET /doc HTTP/1.1\r\nHost: t\r\n\r\n",
    b'GET /doc HTTP/1.1\r\nHost: t\r\nIf-None-Match: "v1"\r\n\r\n',
    b"HEAD /doc HTTP/1.1\r\nHost: t\r\n\r\n",
    b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n",
    b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n",
    # two pipelined in one segment
    b"GET /doc HTTP/1.1\r\nHost: t\r\n\r\nGET /stream HTTP/1.1\r\nHost: t\r\n\r\n",
]
EXPECT_CONTINUE = (
    b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    b"hello",
)
#: Each on a connection of its own: the server closes it after the answer.
CLOSING = (b"GET /doc HTTP/1.0\r\nHost: t\r\n\r\n", b"GET /fails HTTP/1.1\r\nHost: t\r\n\r\n")


class _Counted:
    """A transport that counts the writes made to it."""

    def __init__(self, transport: asyncio.Transport, writes: list[int]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(1)
        self._transport.write(data)

    def writelines(self, parts: Any) -> None:
        self._writes.append(1)
        self._transport.writelines(parts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _counting(base: type[HttpToolsProtocol], writes: list[int]) -> type[HttpToolsProtocol]:
    class Counting(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(_Counted(transport, writes))

    return Counting


def _serve(protocol: type[HttpToolsProtocol]) -> Iterator[int]:
    config = uvicorn.Config(
        APP,
        host="127.0.0.1",
        port=0,
        http=protocol,
        loop="uvloop",
        log_level="critical",
        log_config=None,
        lifespan="off",
        date_header=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(10)


def _read_all(sock: socket.socket, until: bytes | None = None) -> bytes:
    sock.settimeout(0.3)
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return got
        if not chunk:
            return got
        got += chunk


def _exchange(port: int) -> list[bytes]:
    """Each request's answer as received, in order."""
    answers = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for request in REQUESTS:
            sock.sendall(request)
            answers.append(_read_all(sock))
        head, body = EXPECT_CONTINUE
        sock.sendall(head)
        answers.append(_read_all(sock))  # the 100 Continue, before the body is sent
        sock.sendall(body)
        answers.append(_read_all(sock))
    for request in CLOSING:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request)
            answers.append(_read_all(sock))
    return answers


@pytest.fixture(scope="module")
def answers() -> dict[str, tuple[list[bytes], int]]:
    found = {}
    for name, base in (("uvicorn", HttpToolsProtocol), ("one write", OneWriteProtocol)):
        writes: list[int] = []
        for port in _serve(_counting(base, writes)):
            found[name] = (_exchange(port), len(writes))
    return found


def test_the_bytes_on_the_wire_are_uvicorns_own(
    answers: dict[str, tuple[list[bytes], int]],
) -> None:
    """A 200, a 304, a HEAD, a streamed body, a 404, a 500, two pipelined requests, a 100
    Continue and an HTTP/1.0 close: the same bytes, answer by answer."""
    ours, theirs = answers["one write"][0], answers["uvicorn"][0]
    assert ours == theirs
    assert theirs[0].startswith(b"HTTP/1.1 200 OK") and b'"job":"101"' in theirs[0]
    assert theirs[1].startswith(b"HTTP/1.1 304") and theirs[2].endswith(b"\r\n\r\n")
    assert theirs[6] == b"HTTP/1.1 100 Continue\r\n\r\n" and theirs[7].endswith(b"hello")
    assert theirs[-2].startswith(b"HTTP/1.1 200") and theirs[-1].startswith(b"HTTP/1.1 500")


def test_each_response_is_one_write(answers: dict[str, tuple[list[bytes], int]]) -> None:
    """uvicorn writes a response's head, then each part of its body; here the head goes with
    the body's first part: fewer writes by one per response (a HEAD's head is written alone,
    as is the 100 Continue)."""
    responses = 10  # the requests above, the pipelined two included
    assert answers["uvicorn"][1] - answers["one write"][1] == responses - 1  # but the HEAD


def test_the_server_serves_with_one_write_per_response() -> None:
    config = uvicorn_config(FastAPI(), Settings())
    config.load()
    assert config.http_protocol_class is OneWriteProtocol
