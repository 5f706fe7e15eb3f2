"""Who read my weights: the access page and its JSON twin (``docs/security.md``).

``GET /access?path=...`` and ``GET /api/access?path=...`` list the jobs, users and processes
that opened, read, mapped or wrote a protected path (and what is under it), with bytes and
time. Scoped in SQL: a researcher sees the accesses by their own jobs and every access to
the paths their jobs created (team lead: their accounts'), with other users' command lines
redacted; an admin or the security role everything
(``Principal.sees_all_access_records``). 400 on a relative path.

Both are kept answers (``serve/kept.py``): a report is computed once per reader, path and data
generation, and answered on the event loop, past the framework by the read lane.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import as_naive_utc
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.kept import (
    Document,
    cached_json,
    kept_page,
    page_key,
    query_of,
    reader_key,
    serialise,
)
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render
from hpcscope.service.alerts.file_access import AccessPathError, AccessReport, who_accessed

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]
PathQuery = Annotated[str, Query(description="an absolute path: a file or a directory")]
SinceQuery = Annotated[datetime | None, Query(description="only accesses at or after (UTC)")]
#: The most records one report lists.
MAX_LIMIT = 50_000
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="at most this many records")]


def _report(
    request: Request, principal: Principal, path: str, since: datetime | None, limit: int
) -> tuple[AccessReport, Document]:
    """The report and its document, kept per reader, path, since and limit (``serve/kept.py``:
    a path is a request's parameter, bounded by the snapshots' byte budget). Raises
    AccessPathError on a relative path."""
    service = service_of(request)
    moment = as_naive_utc(since) if since is not None else None

    def compute() -> tuple[AccessReport, Document]:
        found = who_accessed(service.store, principal, path, since=moment, limit=limit)
        return found, serialise(found)

    kept: tuple[AccessReport, Document] = service.snapshots.get(
        ("serve.access", reader_key(principal), path, moment, limit),
        compute,
        size=lambda value: len(value[1][0]),
    )
    return kept


def _access_json(
    request: Request, principal: Principal, path: str, since: datetime | None, limit: int
) -> Response:
    return cached_json(request, *_report(request, principal, path, since, limit)[1])


def _limit(query: dict[str, str], default: int) -> int:
    """``limit`` as the routes take it (1 to 50,000); raises ValueError otherwise."""
    text = query.get("limit", str(default))
    value = int(text)
    if not text.isdigit() or not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"limit {text!r}")
    return value


def _lane_access_json(request: Request) -> Response:
    principal = check_principal(request)
    query = query_of(request, ("path", "limit"))
    return _access_json(request, principal, query["path"], None, _limit(query, 5000))


@router.get("/api/access", response_model=AccessReport)
async def access_json(
    request: Request,
    principal: PrincipalDep,
    path: PathQuery,
    since: SinceQuery = None,
    limit: LimitQuery = 5000,
) -> Response:
    """Who opened, read, mapped or wrote ``path`` (and below), newest first."""
    try:
        return await answer(_access_json, request, principal, path, since, limit)
    except AccessPathError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def _page(request: Request, principal: Principal, path: str, limit: int) -> Response:
    """The page (kept per principal and report); raises AccessPathError on a bad path."""
    if not path:
        return kept_page(
            request,
            ("serve.access_page", page_key(principal)),
            lambda: _render(request, principal, ""),
        )
    _report(request, principal, path, None, limit)  # a relative path raises here

    def page() -> Response:
        report, _ = _report(request, principal, path, None, limit)
        return _render(request, principal, path, report)

    return kept_page(request, ("serve.access_page", page_key(principal), path, limit), page)


def _render(
    request: Request,
    principal: Principal,
    path: str,
    report: AccessReport | None = None,
    error: str | None = None,
) -> Response:
    return render(
        request,
        "access.html",
        {"report": report, "path": path, "error": error},
        principal=principal,
        status_code=200 if error is None else 400,
    )


def _lane_page(request: Request) -> Response:
    principal = check_principal(request)
    query = query_of(request, ("path", "limit"))
    return _page(request, principal, query.get("path", ""), _limit(query, 500))


@router.get("/access")
async def access_page(
    request: Request, principal: PrincipalDep, path: str = "", limit: LimitQuery = 500
) -> Response:
    try:
        return await answer(_page, request, principal, path, limit)
    except AccessPathError as exc:
        return _render(request, principal, path, None, str(exc))


#: What the read lane answers past the framework (``serve/read_lane.py``), with the ``path``
#: and ``limit`` parameters (``since`` is the app's).
LANE_ROUTES = (
    LaneRoute("/api/access", lambda request, _: _lane_access_json(request), query=True),
    LaneRoute("/access", lambda request, _: _lane_page(request), query=True),
)
