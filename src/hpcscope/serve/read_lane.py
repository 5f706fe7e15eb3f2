"""The read lane: the most read pages answered from the read snapshots, past the framework.

Under the API load bench (``bench/api_load.py``: 50 clients on the job list, job pages and
documents, the diagram and its live poll) nearly every request is a snapshot hit whose answer
is ready bytes, yet each cost about 0.4 ms of the event loop's CPU in FastAPI's route
matching (every included router's routes, twice), its dependency resolution and its
per-request wrappers: the work itself is a dict lookup. The loop is one thread behind one GIL,
shared with the collector, so that cost, times 50 clients, was the latency.

:class:`ReadLane` is a pure ASGI middleware inside the web edge and the session middleware
(their CSRF check, headers, proxy trust and session cookie apply as before). For a ``GET``
without a query string on one of the routes listed in :data:`LaneRoute` tables (the routes'
own modules list them), it runs the route's own answer function with the route's own
principal rule, on the event loop inside :func:`~hpcscope.service.snapshots.cache_only`,
exactly as :func:`hpcscope.serve.offload.answer` does behind the framework, and sends the
response it returns. Whenever that cannot be done as cheaply, the request goes on to the app
untouched, which answers it the usual way:

* any other method, a query string (unless the route reads its query itself:
  :attr:`LaneRoute.query`), a path no lane route names;
* any exception while answering: a snapshot miss (the app computes in a worker thread; also
  HTTP Basic credentials or an API token not verified in the last minute: a hash or a store
  query, never on the loop), no principal (the app's 401 or login redirect), a job not
  visible, a bad query parameter (the app's 400 or 422), anything unexpected.

A miss on a value that another request is computing already (:attr:`SnapshotMiss.pending`)
is waited for on the event loop, then answered again, up to :data:`WAITS` times: after an alert
write every poll of the alerts or of the diagram misses at once, and each used to take a worker
thread to block on the one computation (50 clients, 40 threads).

Nothing is sent before the answer is complete, so falling through is always possible, and the
same function answers either way: the lane changes what a request costs, never its answer
(``tests/serve/test_read_lane.py`` compares both for every principal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from hpcscope.serve.offload import mark_missed
from hpcscope.service.snapshots import SnapshotMiss, cache_only

#: The answer of a lane route: the request and the path's one parameter ("" when none).
LaneAnswer = Callable[[Request, str], Response]
#: Computations of other requests one request waits for on the loop, at most.
WAITS = 3


@dataclass(frozen=True, slots=True)
class LaneRoute:
    """One route the lane may answer.

    Args:
        path: the route's path, either literal (``/api/jobs``) or with one parameter of the
            default ``str`` kind (one non-empty segment, no ``/``), last
            (``/jobs/{job_id}``) or followed by one literal segment
            (``/api/jobs/{job_id}/timeseries``).
        answer: what the route answers with: its principal rule, then its snapshot reads.
        query: the answer reads the request's query string itself (and raises on a parameter
            it does not take, so that the app answers it): the lane then answers requests with
            one too.
    """

    path: str
    answer: LaneAnswer
    query: bool = False

    @property
    def prefix(self) -> str | None:
        """The literal part before the ``{parameter}``; None for a literal path."""
        return self._parts()[0]

    @property
    def suffix(self) -> str:
        """The literal segment after the ``{parameter}`` (``/timeseries``), or ""."""
        return self._parts()[1]

    def _parts(self) -> tuple[str | None, str]:
        head, brace, tail = self.path.partition("/{")
        if not brace:
            return None, ""
        name, closed, after = tail.partition("}")
        last = after.removeprefix("/")
        if (
            "{" in head
            or not closed
            or ":" in name
            or "{" in after
            or (after and (not after.startswith("/") or not last or "/" in last))
        ):
            raise ValueError(
                f"lane route {self.path!r}: one str parameter at most, last or before one "
                "literal segment"
            )
        return head + "/", after


class ReadLane:
    """The read lane (module docstring) in front of ``app``.

    Args:
        app: the rest of the stack (the framework's exception handling and routes).
        routes: the routes the lane answers; a path listed twice is an error.
    """

    def __init__(self, app: ASGIApp, *, routes: Iterable[LaneRoute]) -> None:
        self.app = app
        self._literal: dict[str, LaneRoute] = {}
        self._prefixed: dict[tuple[str, str], LaneRoute] = {}
        for route in routes:
            prefix = route.prefix
            if prefix is None:
                if route.path in self._literal:
                    raise ValueError(f"lane route {route.path!r} listed twice")
                self._literal[route.path] = route
                continue
            key = (prefix, route.suffix)
            if key in self._prefixed:
                raise ValueError(f"lane route {route.path!r} listed twice")
            self._prefixed[key] = route
        self.answered = 0
        """Requests the lane answered itself (for tests and benches)."""

    def _route(self, path: str, query: bool) -> tuple[LaneAnswer, str] | None:
        literal = self._literal.get(path)
        if literal is not None:
            return (literal.answer, "") if literal.query or not query else None
        cut = path.rfind("/") + 1
        prefixed = self._prefixed.get((path[:cut], ""))
        if prefixed is not None and cut < len(path) and (prefixed.query or not query):
            return prefixed.answer, path[cut:]
        head = path[: cut - 1]  # the parameter before one literal segment
        start = head.rfind("/") + 1
        suffixed = self._prefixed.get((head[:start], path[cut - 1 :])) if cut > 1 else None
        if suffixed is not None and start < len(head) and (suffixed.query or not query):
            return suffixed.answer, head[start:]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            found = self._route(scope["path"], bool(scope["query_string"]))
            if found is not None:
                request = Request(scope, receive)
                response = _answer(request, *found)
                for _ in range(WAITS):
                    if not isinstance(response, Future):
                        break
                    await _settled(response)  # another request computes it: then again
                    response = _answer(request, *found)
                if isinstance(response, Future):
                    mark_missed(request)
                    response = None
                if isinstance(response, HTTPException):  # a 404 the route raised: its answer
                    response = await http_exception_handler(request, response)
                if response is not None:
                    self.answered += 1
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _answer(
    request: Request, answer: LaneAnswer, parameter: str
) -> Response | HTTPException | Future[Any] | None:
    """The route's answer from the snapshots, the HTTP error it raised (answered as the
    framework answers it: the app has no handler of its own for them), another request's
    computation of what it missed (to wait for), or None: the app answers (module
    docstring)."""
    try:
        return cache_only(answer, request, parameter)
    except HTTPException as exc:
        return exc
    except SnapshotMiss as miss:
        if miss.pending is not None:
            return miss.pending
        mark_missed(request)  # the app computes it in a worker thread, without a second pass
        return None
    except Exception:  # the app answers it, raising it again where it has its handlers
        return None


async def _settled(pending: Future[Any]) -> None:
    """Until ``pending`` (computed in another thread) is done, whatever its outcome; a request
    that stops waiting leaves it as it is (never cancelled: other callers wait for it)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def wake(_: Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop closed (the server stopped): nobody waits any more
            pass

    pending.add_done_callback(wake)
    await done
