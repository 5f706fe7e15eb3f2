"""A small HTTP/1.1 GET client for ``http://`` scrape targets, on asyncio protocols.

A collector of a 1,024-GPU cluster at 1 s issues 128 GETs a second, each for one ~45 KiB page.
Through httpx2 each costs ~2.5 ms of CPU in its connection pool, stream and event machinery:
more than parsing the page 10 times. This client does only what a scrape needs, the way
Prometheus' scraper does: one kept-alive connection per target (a pool per origin), the request
written in one ``write``, the response read in ``data_received`` into one buffer and parsed
once (status line, headers, then a ``Content-Length``, ``chunked`` or read-until-close body),
``gzip``/``deflate`` decoded with a size limit, and up to 5 redirects. It reads RFC 9112
responses; anything else it cannot read (an ``https`` target, credentials in the URL) is left to
httpx2 by the scraper (:meth:`FastClient.handles`).

Errors are :class:`HttpFailure` with the operator's message; the caller's timeout cancels a
request, which closes its connection (its state is unknown).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from hpcscope.model.errors import ScrapeError

__all__ = ["FastClient", "HttpFailure", "Response"]

_MAX_HEAD_BYTES = 64 * 1024
_MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class HttpFailure(ScrapeError):
    """No usable response: the message says why (refused, closed mid-body, too large...)."""

    def __init__(self, message: str, body_bytes: int = 0) -> None:
        super().__init__(message)
        self.body_bytes = body_bytes


@dataclass(frozen=True, slots=True)
class Response:
    """A complete response: status, reason, headers (lower-case names), decoded body."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


class _Connection(asyncio.Protocol):
    """One TCP connection; reads one response at a time into a buffer."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False
        self._buffer = bytearray()
        self._done: asyncio.Future[None] | None = None
        self._on_status: Callable[[int], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.body = b""
        self.keep_alive = True
        self._body_start = -1
        self._length: int | None = None
        self._chunked = False
        self._chunks: list[bytes] = []
        self._chunk_pos = 0
        self._chunk_bytes = 0
        self._error: HttpFailure | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            self.closed = True  # bytes nobody asked for: the connection is not reusable
            if self.transport is not None:
                self.transport.close()
            return
        self._buffer += data
        try:
            if self._advance():
                self._done.set_result(None)
        except HttpFailure as failure:
            self.keep_alive = False
            self._done.set_exception(failure)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        done = self._done
        if done is None or done.done():
            return
        if self._body_start >= 0 and self._length is None and not self._chunked:
            self.body = bytes(self._buffer[self._body_start :])  # read until close
            self.keep_alive = False
            done.set_result(None)
            return
        sent = max(0, len(self._buffer) - max(self._body_start, 0))
        done.set_exception(
            HttpFailure(
                "connection closed before the whole page arrived"
                + (f": {exc}" if exc is not None else ""),
                sent,
            )
        )

    # -- one exchange -----------------------------------------------------------------------

    async def request(self, data: bytes, on_status: Callable[[int], None]) -> None:
        assert self.transport is not None
        self._reset()
        self._buffer.clear()
        self._on_status = on_status
        self._done = asyncio.get_running_loop().create_future()
        self.used = True
        self.transport.write(data)
        try:
            await self._done
        except BaseException:  # a timeout, or a failure: this connection's state is unknown
            self.close()
            raise
        if not self.keep_alive:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _advance(self) -> bool:
        """Parse what arrived; True once the response is complete."""
        buffer = self._buffer
        if self._body_start < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD_BYTES:
                    raise HttpFailure("response headers larger than 64 KiB")
                return False
            self._head(bytes(buffer[:end]).decode("latin-1"))
            self._body_start = end + 4
            if self._on_status is not None:
                self._on_status(self.status)
        start = self._body_start
        if self._chunked:
            return self._advance_chunks()
        if self._length is not None:
            if len(buffer) - start < self._length:
                return False
            self.body = bytes(buffer[start : start + self._length])
            return True
        if len(buffer) - start > self.max_body_bytes:
            raise HttpFailure(f"body too large: more than {self.max_body_bytes} bytes")
        return False  # read until the server closes

    def _head(self, text: str) -> None:
        status_line, *lines = text.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HttpFailure(f"not an HTTP/1.x response: {status_line[:80]!r}")
        self.status, self.reason = int(code), reason.strip()
        headers = self.headers
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpFailure(f"malformed response header {line[:80]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        connection = headers.get("connection", "").lower()
        self.keep_alive = (
            "close" not in connection
            if version == "HTTP/1.1"
            else "keep-alive" in connection
        )  # fmt: skip
        encoding = headers.get("transfer-encoding", "").lower()
        if encoding:
            if encoding.rsplit(",", 1)[-1].strip() != "chunked":
                raise HttpFailure(f"unsupported Transfer-Encoding {encoding!r}")
            self._chunked = True
            return
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HttpFailure(f"malformed Content-Length {declared!r}")
            if int(declared) > self.max_body_bytes:
                raise HttpFailure(
                    f"body too large: Content-Length {declared} > {self.max_body_bytes} bytes"
                )
            self._length = int(declared)
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self._length = 0
        else:
            self.keep_alive = False

    def _advance_chunks(self) -> bool:
        buffer = self._buffer
        pos = max(self._chunk_pos, self._body_start)
        while True:
            line_end = buffer.find(b"\r\n", pos)
            if line_end < 0:
                self._chunk_pos = pos
                return False
            size_text = bytes(buffer[pos:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpFailure(f"malformed chunk size {size_text[:20]!r}") from None
            if size == 0:  # the last chunk; trailers, if any, end with an empty line
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    self._chunk_pos = pos
                    return False
                self.body = b"".join(self._chunks)
                return True
            data_start = line_end + 2
            if len(buffer) < data_start + size + 2:
                self._chunk_pos = pos
                return False
            self._chunk_bytes += size
            if self._chunk_bytes > self.max_body_bytes:
                raise HttpFailure(f"body too large: more than {self.max_body_bytes} bytes")
            self._chunks.append(bytes(buffer[data_start : data_start + size]))
            pos = data_start + size + 2


class FastClient:
    """GETs over kept-alive connections, one pool per origin, all in one event loop.

    Args:
        headers: request headers sent with every GET (``Accept``, ``User-Agent``).
        max_body_bytes: a larger body, declared or received (after decoding), is refused.
    """

    def __init__(self, headers: dict[str, str], *, max_body_bytes: int) -> None:
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.max_body_bytes = max_body_bytes
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._requests: dict[str, tuple[tuple[str, int], bytes]] = {}

    @staticmethod
    def handles(url: str) -> bool:
        """Whether this client reads ``url`` (plain ``http``, no credentials in it)."""
        parts = urlsplit(url)
        return parts.scheme == "http" and parts.hostname is not None and "@" not in parts.netloc

    def _prepared(self, url: str) -> tuple[tuple[str, int], bytes]:
        prepared = self._requests.get(url)
        if prepared is None:
            parts = urlsplit(url)
            if parts.hostname is None:
                raise HttpFailure(f"no host in {url!r}")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            request = (
                f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n{self._headers}"
                "Accept-Encoding: gzip\r\n\r\n"
            ).encode("latin-1")
            prepared = ((parts.hostname, parts.port or 80), request)
            if len(self._requests) < 100_000:
                self._requests[url] = prepared
        return prepared

    async def get(self, url: str, on_status: Callable[[int], None]) -> Response:
        """GET ``url``, following up to 5 redirects; ``on_status`` hears each status at once."""
        for _ in range(_MAX_REDIRECTS + 1):
            connection = await self._exchange(url, on_status)
            status = connection.status
            location = connection.headers.get("location")
            if status in _REDIRECTS and location:
                url = urljoin(url, location)
                if not self.handles(url):
                    raise HttpFailure(f"redirect to {url!r}, which this scraper does not follow")
                continue
            return Response(status, connection.reason, connection.headers, self._decode(connection))
        raise HttpFailure(f"too many redirects: more than {_MAX_REDIRECTS}")

    async def _exchange(self, url: str, on_status: Callable[[int], None]) -> _Connection:
        origin, request = self._prepared(url)
        for attempt in range(2):
            connection = await self._connection(origin)
            reused = connection.used
            try:
                await connection.request(request, on_status)
            except HttpFailure:
                # a kept-alive connection the server closed before answering: once more, fresh
                if reused and attempt == 0 and connection.status == 0:
                    continue
                raise
            if connection.keep_alive and not connection.closed:
                self._idle.setdefault(origin, []).append(connection)
            return connection
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self, origin: tuple[str, int]) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(
                lambda: _Connection(self.max_body_bytes), origin[0], origin[1]
            )
        except ConnectionRefusedError:
            raise HttpFailure("connection refused") from None
        except OSError as exc:
            raise HttpFailure(f"cannot connect: {exc}") from None
        return protocol

    def _decode(self, connection: _Connection) -> bytes:
        body = connection.body
        encoding = connection.headers.get("content-encoding", "").strip().lower()
        if not encoding or encoding == "identity":
            return body
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise HttpFailure(f"unsupported Content-Encoding {encoding!r}", len(body))
        wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
        decoder = zlib.decompressobj(wbits)
        try:
            data = decoder.decompress(body, self.max_body_bytes + 1)
        except zlib.error as exc:
            raise HttpFailure(f"cannot decode the {encoding} body: {exc}", len(body)) from None
        if len(data) > self.max_body_bytes:
            raise HttpFailure(f"body too large: more than {self.max_body_bytes} bytes", len(body))
        return data

    def close(self) -> None:
        """Close every kept-alive connection."""
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
