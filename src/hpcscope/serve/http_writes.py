"""One write per response: a response's status line and headers sent with its body's first part.

uvicorn's httptools protocol writes a response's status line and headers when the app starts
the response, then its body: two writes to the socket, each a system call made on the event
loop with the interpreter lock held (the loop's transport writes at once when it can). Under
the API load bench's mix at 128 nodes those writes were a fifth of the loop's samples, most of
the answers being a few hundred bytes (a 304, a kept document). :class:`OneWriteProtocol` holds
the head of each response until the body's first part comes, then hands both to the transport
together (``writelines``: one vectored write, nothing copied); the bytes on the wire, their
order and the connection's handling (keep-alive, ``100 Continue``, pipelining, errors) are
uvicorn's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _HeldHead:
    """One request's transport as its response cycle sees it: the first write after the
    response started (its status line and headers) is held, and sent with the next write, at
    the response's end (a ``HEAD``'s, which has no body to write) or before a close."""

    __slots__ = ("_cycle", "_head", "_started", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if not self._started and self._cycle.response_started:
            self._started = True  # the head: a 100 Continue before it is written at once
            self._head = data
            return
        head, self._head = self._head, None
        if head is None:
            self._transport.write(data)
        else:
            self._transport.writelines((head, data))

    def flush(self) -> None:
        """Send a head still held."""
        head, self._head = self._head, None
        if head is not None:
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose responses go out in one write each (module
    docstring): pass as uvicorn's ``http``."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        assert cycle is not None
        held = _HeldHead(self.transport, cycle)
        cycle.transport = held  # type: ignore[assignment]
        cycle.on_response = _flushing(held, cycle.on_response)


def _flushing(held: _HeldHead, on_response: Callable[[], None]) -> Callable[[], None]:
    def flushed() -> None:
        held.flush()
        on_response()

    return flushed
