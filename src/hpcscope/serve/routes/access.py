"""Who read my weights: the access page and its JSON twin (``docs/security.md``).

``GET /access?path=...`` and ``GET /api/access?path=...`` list the jobs, users and processes
that opened, read, mapped or wrote a protected path (and what is under it), with bytes and
time. Scoped in SQL: a researcher sees the accesses by their own jobs and every access to
the paths their jobs created (team lead: their accounts'), with other users' command lines
redacted; an admin or the security role everything
(``Principal.sees_all_access_records``). 400 on a relative path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import as_naive_utc
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render
from hpcscope.service.alerts.file_access import AccessPathError, AccessReport, who_accessed

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]
PathQuery = Annotated[str, Query(description="an absolute path: a file or a directory")]
SinceQuery = Annotated[datetime | None, Query(description="only accesses at or after (UTC)")]
LimitQuery = Annotated[int, Query(ge=1, le=50_000, description="at most this many records")]


def _report(
    request: Request, principal: Principal, path: str, since: datetime | None, limit: int
) -> AccessReport:
    store = service_of(request).store
    moment = as_naive_utc(since) if since is not None else None
    return who_accessed(store, principal, path, since=moment, limit=limit)


@router.get("/api/access")
def access_json(
    request: Request,
    principal: PrincipalDep,
    path: PathQuery,
    since: SinceQuery = None,
    limit: LimitQuery = 5000,
) -> AccessReport:
    """Who opened, read, mapped or wrote ``path`` (and below), newest first."""
    try:
        return _report(request, principal, path, since, limit)
    except AccessPathError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


@router.get("/access")
def access_page(
    request: Request, principal: PrincipalDep, path: str = "", limit: LimitQuery = 500
) -> Response:
    report, error, status = None, None, 200
    if path:
        try:
            report = _report(request, principal, path, None, limit)
        except AccessPathError as exc:
            error, status = str(exc), 400
    return render(
        request,
        "access.html",
        {"report": report, "path": path, "error": error},
        principal=principal,
        status_code=status,
    )
