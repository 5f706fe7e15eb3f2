"""Async scraper for any list of Prometheus ``/metrics`` targets.

One :class:`Scraper` per collector: it scrapes targets concurrently (at most ``concurrency``
at a time), gives each a total time budget and a body size limit, parses each page with that
target's own :class:`~hpcscope.ingest.exposition.parser.ExpositionParser` (whose key cache makes the
second scrape cheap), and remembers when each target last succeeded so the collector can
record gaps. Nothing a target does escapes :meth:`Scraper.scrape` as an exception: a target
that hangs, refuses the connection, answers HTTP 500, closes mid-body, sends an HTML error page
or garbage gives a :class:`ScrapeResult` with ``ok=False`` (or ``ok=True`` with rejected lines
for a partly malformed page) and an ``error`` an operator can read.

The request asks for the text format 0.0.4 (``Accept: text/plain;version=0.0.4``), which is
what the parser reads; an exporter that answers OpenMetrics or protobuf anyway is reported as
a wrong content type. Proxies from the environment are ignored (``trust_env=False``): targets
are cluster-internal.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx2
import pyarrow as pa

from hpcscope.ingest.exposition.http1 import FastClient, HttpFailure
from hpcscope.ingest.exposition.parser import ExpositionParser, ParsedPage, Series
from hpcscope.ingest.exposition.targets import Target, TargetsError, load_file_sd, parse_file_sd
from hpcscope.model.errors import ScrapeError
from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.model.timeutil import as_naive_utc

__all__ = [
    "ScrapeResult",
    "Scraper",
    "Target",
    "TargetsError",
    "load_file_sd",
    "parse_file_sd",
    "scrape_results_table",
]

log = logging.getLogger(__name__)

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
_TEXT_TYPES = ("text/plain",)
_USER_AGENT = "hpcscope-scraper"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """What one scrape of one target gave.

    ``ok`` is True when a page was fetched and read (possibly with ``rejected_lines``
    malformed lines skipped, then ``error`` says so); False when no usable page came back
    (``error`` says why: timeout, connection refused, HTTP 500, body too large, wrong content
    type, nothing but malformed lines...).
    """

    target: Target
    started_at: datetime
    duration_seconds: float
    ok: bool
    http_status: int | None
    error: str | None
    page: ParsedPage | None
    rejected_lines: int
    body_bytes: int = 0

    @property
    def samples(self) -> int:
        """Number of samples read from the page."""
        return 0 if self.page is None else len(self.page)

    def as_row(self) -> dict[str, object]:
        """This result as a row of :data:`hpcscope.model.schemas.SCRAPE_SCHEMA`."""
        return {
            "ts": as_naive_utc(self.started_at),
            "target": self.target.url,
            "exporter": self.target.exporter,
            "node": self.target.node,
            "ok": self.ok,
            "duration_seconds": self.duration_seconds,
            "samples": self.samples,
            "rejected_lines": self.rejected_lines,
            "error": self.error,
        }


def scrape_results_table(results: Iterable[ScrapeResult]) -> pa.Table:
    """Scrape results as a table of SCRAPE_SCHEMA (the collector's own health, and gaps)."""
    return pa.Table.from_pylist([result.as_row() for result in results], schema=SCRAPE_SCHEMA)


class _Failed(ScrapeError):
    """A scrape that ended without a usable page; the message is the operator's error."""

    def __init__(self, message: str, body_bytes: int = 0) -> None:
        super().__init__(message)
        self.body_bytes = body_bytes


class Scraper:
    """Scrapes targets concurrently and tracks when each last succeeded.

    Use as ``async with Scraper() as scraper: results = await scraper.scrape(targets)``, or
    call :meth:`aclose` when done. Not safe for concurrent :meth:`scrape` calls that share a
    target (a target's parser is stateful).

    Args:
        concurrency: at most this many scrapes in flight.
        timeout_seconds: total time budget per target (connect, headers and body).
        max_body_bytes: a page larger than this (after decompression) is refused.
        clock: the wall clock, UTC (tests pass their own).
        transport: an httpx2 transport (default: real TCP connections).
    """

    def __init__(
        self,
        *,
        concurrency: int = 32,
        timeout_seconds: float = 5.0,
        max_body_bytes: int = 32 * 2**20,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.timeout_seconds = timeout_seconds
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self._transport = transport
        self._client: httpx2.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncGenerator[None, None] | None = None
        self._fast: FastClient | None = None
        self._fast_loop: asyncio.AbstractEventLoop | None = None
        self._fast_closer: AsyncGenerator[None, None] | None = None
        self._parsers: dict[str, ExpositionParser] = {}
        self._targets: dict[str, Target] = {}
        self._last_success: dict[str, datetime] = {}

    async def __aenter__(self) -> Scraper:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections of the current event loop's client."""
        closer, self._closer = self._closer, None
        self._client = None
        if closer is not None and self._client_loop is asyncio.get_running_loop():
            await closer.aclose()
        fast_closer, self._fast_closer = self._fast_closer, None
        self._fast = None
        if fast_closer is not None and self._fast_loop is asyncio.get_running_loop():
            await fast_closer.aclose()

    async def _http(self) -> httpx2.AsyncClient:
        """The HTTP client of the running event loop (connections belong to one loop).

        A scraper driven from successive loops (one ``asyncio.run()`` per cycle) gets a client
        per loop. Each client is closed when its loop shuts down: ``asyncio.run()`` finalizes
        the pending async generator :meth:`_close_at_loop_end` before closing the loop, so no
        connection outlives its loop.
        """
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is loop:
            return self._client
        client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(self.timeout_seconds),
            # one kept-alive connection per target: scrapes are bounded by the semaphore
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=None),
            headers={"Accept": ACCEPT, "User-Agent": _USER_AGENT},
            follow_redirects=True,
            max_redirects=5,
            trust_env=False,
            transport=self._transport,
        )
        closer = _close_at_loop_end(client)
        await anext(closer)
        self._client, self._client_loop, self._closer = client, loop, closer
        return client

    async def _fast_client(self) -> FastClient:
        """The plain-HTTP client of the running event loop (see :meth:`_http`)."""
        loop = asyncio.get_running_loop()
        if self._fast is not None and self._fast_loop is loop:
            return self._fast
        fast = FastClient(
            {"Accept": ACCEPT, "User-Agent": _USER_AGENT}, max_body_bytes=self.max_body_bytes
        )
        closer = _close_fast_at_loop_end(fast)
        await anext(closer)
        self._fast, self._fast_loop, self._fast_closer = fast, loop, closer
        return fast

    async def scrape(self, targets: Sequence[Target]) -> list[ScrapeResult]:
        """Scrape every target once, concurrently; results in the order of ``targets``."""
        limit = asyncio.Semaphore(self.concurrency)

        async def one(target: Target) -> ScrapeResult:
            async with limit:
                return await self.scrape_one(target)

        return list(await asyncio.gather(*(one(target) for target in targets)))

    async def scrape_one(self, target: Target) -> ScrapeResult:
        """Scrape one target; never raises for anything the target does."""
        self._targets.setdefault(target.url, target)
        started_at = self._clock()
        start = time.monotonic()
        seen_status: list[int] = []  # set as soon as the headers arrive
        body_bytes = 0
        page: ParsedPage | None = None
        try:
            async with asyncio.timeout(self.timeout_seconds):
                body = await self._fetch(target, seen_status)
            body_bytes = len(body)
            parser = self._parsers.setdefault(target.url, ExpositionParser())
            page = parser.parse(body, source=target.url)
            ok, error = _judge(page)
        except _Failed as failed:
            ok, error = False, str(failed)
            body_bytes = failed.body_bytes
        except TimeoutError:
            ok, error = False, f"timeout: no complete page within {self.timeout_seconds:g} s"
        except httpx2.HTTPError as exc:
            ok, error = False, _describe_http_error(exc)
        except Exception as exc:  # a bug of ours must not stop the collector
            log.exception("unexpected error scraping %s", target.url)
            ok, error = False, f"unexpected error: {type(exc).__name__}: {exc}"
        duration = time.monotonic() - start
        if ok:
            self._last_success[target.url] = started_at
        else:
            log.debug("scrape of %s failed: %s", target.url, error)
        return ScrapeResult(
            target=target,
            started_at=started_at,
            duration_seconds=duration,
            ok=ok,
            http_status=seen_status[0] if seen_status else None,
            error=error,
            page=page if ok else None,
            rejected_lines=0 if page is None else page.rejected_lines,
            body_bytes=body_bytes,
        )

    async def _fetch(self, target: Target, seen_status: list[int]) -> bytes:
        if self._transport is None and FastClient.handles(target.url):
            return await self._fetch_fast(target, seen_status)
        client = await self._http()
        async with client.stream("GET", target.url) as response:
            status = response.status_code
            seen_status.append(status)
            if status != 200:
                snippet = await _snippet(response)
                reason = response.reason_phrase or ""
                raise _Failed(f"HTTP {status} {reason}".rstrip() + snippet)
            content_type = response.headers.get("content-type", "")
            media_type = content_type.split(";", 1)[0].strip().lower()
            if media_type and media_type not in _TEXT_TYPES:
                raise _Failed(
                    f"wrong content type {content_type!r}: expected text/plain "
                    "(Prometheus text format 0.0.4)"
                )
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                raise _Failed(
                    f"body too large: Content-Length {declared} > {self.max_body_bytes} bytes"
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise _Failed(f"body too large: more than {self.max_body_bytes} bytes", size)
                chunks.append(chunk)
            return b"".join(chunks)

    async def _fetch_fast(self, target: Target, seen_status: list[int]) -> bytes:
        """:meth:`_fetch` through :class:`~hpcscope.ingest.exposition.http1.FastClient`."""
        client = await self._fast_client()
        try:
            response = await client.get(target.url, seen_status.append)
        except HttpFailure as failure:
            raise _Failed(str(failure), failure.body_bytes) from None
        if response.status != 200:
            text = " ".join(response.body[:200].decode("utf-8", "replace").split())
            reason = f"HTTP {response.status} {response.reason}".rstrip()
            raise _Failed(reason + (f": {text}" if text else ""))
        content_type = response.headers.get("content-type", "")
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type and media_type not in _TEXT_TYPES:
            raise _Failed(
                f"wrong content type {content_type!r}: expected text/plain "
                "(Prometheus text format 0.0.4)"
            )
        return response.body

    def series(self, target: Target) -> Sequence[Series]:
        """The series table of ``target``'s parser: what its pages' ``series_ids`` index.

        The same object as ``result.page.series`` for the target's latest page (empty before
        the first scrape). Pass it, or nothing, to the dcgm converter.
        """
        parser = self._parsers.get(target.url)
        return () if parser is None else parser.series

    # -- staleness ---------------------------------------------------------------------------

    def last_success(self, target: Target) -> datetime | None:
        """When ``target`` last gave a usable page (the scrape's start), or None if never."""
        return self._last_success.get(target.url)

    def stale_targets(self, now: datetime, stale_after_seconds: float) -> list[Target]:
        """Targets scraped before whose last success is older than ``stale_after_seconds``.

        A target that never succeeded is stale too: its data is missing, which is a gap.
        """
        horizon = now - timedelta(seconds=stale_after_seconds)
        return [
            target
            for url, target in self._targets.items()
            if (last := self._last_success.get(url)) is None or last < horizon
        ]

    def forget(self, target: Target) -> None:
        """Drop a target that left the target list: its parser, cache and staleness."""
        self._targets.pop(target.url, None)
        self._parsers.pop(target.url, None)
        self._last_success.pop(target.url, None)


async def _close_at_loop_end(client: httpx2.AsyncClient) -> AsyncGenerator[None, None]:
    """Suspended until its loop finalizes async generators (or :meth:`Scraper.aclose`)."""
    try:
        yield
    finally:
        if not client.is_closed:
            await client.aclose()


async def _close_fast_at_loop_end(client: FastClient) -> AsyncGenerator[None, None]:
    """As :func:`_close_at_loop_end`, for the plain-HTTP client."""
    try:
        yield
    finally:
        client.close()


def _judge(page: ParsedPage) -> tuple[bool, str | None]:
    """Is a fetched page usable, and what should the operator hear about it?"""
    if page.rejected_lines == 0:
        return True, None
    first = page.errors[0].describe() if page.errors else ""
    lines = "line" if page.rejected_lines == 1 else "lines"
    summary = f"{page.rejected_lines} malformed {lines} rejected; first: {first}"
    if len(page) == 0:
        return False, f"no samples: {summary}"
    return True, summary


async def _snippet(response: httpx2.Response) -> str:
    """The start of an error page's body, on one line, to show with the status."""
    try:
        data = b""
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) >= 200:
                break
    except httpx2.HTTPError:
        return ""
    text = " ".join(data[:200].decode("utf-8", "replace").split())
    return f": {text}" if text else ""


def _describe_http_error(exc: httpx2.HTTPError) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
        ):
            return "connection refused"
        cause = cause.__cause__ or cause.__context__
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    if isinstance(exc, httpx2.TimeoutException):
        return f"timeout: {text}"
    if isinstance(exc, httpx2.RemoteProtocolError):
        return f"connection closed before the whole page arrived: {text}"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect: {text}"
    if isinstance(exc, httpx2.TooManyRedirects):
        return f"too many redirects: {text}"
    return f"{type(exc).__name__}: {text}"
