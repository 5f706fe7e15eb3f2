"""Kept answers: what a polled page or document serves from the read snapshots.

Every GET a browser tab or a script polls is answered the way the job list is: its document is
computed and serialised once per data generation (the collector's cycle, ``service/snapshots.py``)
and key, or once per ``every_seconds`` for a report over hours or months, and every request in
between is a dictionary lookup with an ``ETag`` (304 on a match), answered on the event loop
(:func:`hpcscope.serve.offload.answer`, and past the framework by the read lane,
``serve/read_lane.py``). A write that changes an answer between two cycles (an alert
acknowledged, a trace uploaded) is in its key (:meth:`~hpcscope.service.core.Service.changes`),
so the next read sees it.

**Keys.** A key holds everything the answer depends on: the route, its parameters, what the
computation reads of the principal, and the count of the writes between cycles that change it;
never the data's instant or version, which would leave one entry per generation behind: an
entry is recomputed in place as the generations pass (``service/snapshots.py``), so what is kept
follows who reads what, not the time served. :func:`reader_key` is what a computation that reads
more than a scope may use of the principal (a name in a report's title, a role's redactions); a
page holds the principal itself (their name is on it) and reads its document when rendered. The
scope check runs inside the computation, with the principal the key names: a key never names
one principal's answer under another's.

**Pages.** A kept page is answered like a document: with its ``ETag`` (a hash of the body,
kept with it) and ``Cache-Control: no-cache``, and 304 when the client already has it. The
overview's live part is polled every 5 s by every open tab and is half a megabyte at 128
nodes: a tab whose page has not changed since its last poll is sent no body again.

**Parameters.** A route that reads a query string parses it with :func:`query_of`, which
refuses (raises) a repeated or unknown parameter: the read lane then hands the request to the
app, whose validation answers it, and a key can only be built from values the route accepts.
The snapshots' byte budget bounds what parameters an attacker could vary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence

from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from hpcscope.model.access import Principal, Role
from hpcscope.model.errors import InputError
from hpcscope.serve.auth import service_of
from hpcscope.service.keeper import PassKeeper
from hpcscope.service.snapshots import Snapshots

#: A report over hours, days or months (SLOs, chargeback) is computed at most this often: the
#: default scrape interval, so a short cycle does not recompute a month for every 2 s of data.
REPORT_EVERY_SECONDS = 15.0

#: A serialised document and its ETag.
Document = tuple[bytes, str]
#: A rendered page: its status, body and ETag.
Page = tuple[int, bytes, str]


def etag_of(body: bytes) -> str:
    """A strong ETag of a response body."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def cached_json(request: Request, body: bytes, etag: str) -> Response:
    """``body`` as JSON with its ETag, or 304 when the client already has it."""
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Cookie, Authorization"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def cached_html(request: Request, body: bytes, etag: str) -> Response:
    """``body`` as an HTML page with its ETag, or 304 when the client already has it."""
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Cookie, Authorization"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return HTMLResponse(body, headers=headers)


#: What a kept route computes: a contract, or the plain JSON values the route would return.
JsonDocument = BaseModel | Mapping[str, object] | Sequence[object]


def reader_key(principal: Principal) -> tuple[str, Role, frozenset[str]]:
    """What a read computation may use of a principal: name, role, coordinated accounts (not
    how it authenticated, nor whether it may write: no read depends on those)."""
    return (principal.name, principal.role, principal.coordinated_accounts)


def page_key(principal: Principal) -> tuple[tuple[str, Role, frozenset[str]], bool]:
    """What a page may use of a principal: :func:`reader_key`, and whether it may change
    anything (its buttons): a page read by HTTP Basic and one read with the session cookie are
    the same page."""
    return reader_key(principal), principal.may_change


def serialise(value: JsonDocument) -> Document:
    """A document's bytes as the framework writes a route's return value, and their ETag."""
    content = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    body = bytes(JSONResponse(content).body)
    return body, etag_of(body)


def _document_size(document: Document) -> int:
    return len(document[0])


def kept_document(
    request: Request,
    key: Hashable,
    compute: Callable[[], JsonDocument],
    *,
    every_seconds: float = 0.0,
) -> Document:
    """The serialised document of ``key`` from the snapshots (computed by ``compute``)."""
    return service_of(request).snapshots.get(
        key,
        lambda: serialise(compute()),
        every_seconds=every_seconds,
        size=_document_size,
    )


def kept_json(
    request: Request,
    key: Hashable,
    compute: Callable[[], JsonDocument],
    *,
    every_seconds: float = 0.0,
) -> Response:
    """:func:`kept_document` as a response (ETag, 304)."""
    body, etag = kept_document(request, key, compute, every_seconds=every_seconds)
    return cached_json(request, body, etag)


def _page_size(page: Page) -> int:
    return len(page[1])


def kept_page(
    request: Request,
    key: Hashable,
    render: Callable[[], Response],
    *,
    every_seconds: float = 0.0,
    version: Hashable = None,
    inline: bool = False,
) -> Response:
    """A rendered page from the snapshots (``render`` reads its data and renders it: its
    status and body), rendered again once per generation (or ``every_seconds``) like the data
    it shows, so one entry per key, whatever the data's changes (``version``: the count of the
    writes between cycles it shows, :meth:`~hpcscope.service.snapshots.Snapshots.get`); a
    page answered 200 comes with its ETag (304 on a match, :func:`cached_html`). ``inline``:
    ``render`` reads memory only and costs a few milliseconds, rendered on the read lane
    (:meth:`~hpcscope.service.snapshots.Snapshots.get`)."""

    parts = kept_page_parts(
        request, key, render, every_seconds=every_seconds, version=version, inline=inline
    )
    return page_response(request, parts)


def page_response(request: Request, page: Page) -> Response:
    """A kept page as a response: with its ETag when answered 200 (:func:`cached_html`)."""
    status, body, etag = page
    if status != 200:
        return HTMLResponse(body, status_code=status)
    return cached_html(request, body, etag)


def kept_page_parts(
    request: Request,
    key: Hashable,
    render: Callable[[], Response],
    *,
    every_seconds: float = 0.0,
    version: Hashable = None,
    inline: bool = False,
) -> Page:
    """:func:`kept_page`'s status, body and ETag (for a page that holds another)."""

    def rendered() -> Page:
        response = render()
        body = bytes(response.body)
        return response.status_code, body, etag_of(body)

    page: Page = service_of(request).snapshots.get(
        key,
        rendered,
        every_seconds=every_seconds,
        size=_page_size,
        version=version,
        inline=inline,
    )
    return page


class AheadKeeper(PassKeeper):
    """After a collector cycle, :meth:`~hpcscope.service.snapshots.Snapshots.keep_ahead` on a
    thread of its own (:class:`~hpcscope.service.keeper.PassKeeper`): the reports over hours or
    months read with ``ahead`` (the SLOs) are recomputed before they are due, so their readers
    find them current and the refresh threads' queue (a month of finished jobs' entries under
    load) never holds one back past its stale window into a request."""

    def __init__(
        self,
        snapshots: Snapshots,
        *,
        lead_seconds: float,
        start: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        super().__init__(name="hpcscope-kept-ahead", start=start)
        self.snapshots = snapshots
        self.lead_seconds = lead_seconds

    @property
    def computed(self) -> int:
        """Entries recomputed ahead so far."""
        return self.done

    def work(self) -> int:
        return self.snapshots.keep_ahead(lead_seconds=self.lead_seconds)


class QueryRefused(InputError):
    """A query string the kept path does not take (the app answers it instead)."""


def query_of(request: Request, accepted: Collection[str]) -> dict[str, str]:
    """The request's query parameters, each once and each in ``accepted``.

    Raises:
        QueryRefused: a repeated or unknown parameter.
    """
    pairs = request.query_params.multi_items()
    values = dict(pairs)
    if len(values) != len(pairs) or not values.keys() <= set(accepted):
        raise QueryRefused(str(request.url.query))
    return values
