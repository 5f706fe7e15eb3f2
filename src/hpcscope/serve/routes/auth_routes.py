"""Login and logout pages, and ``/api/whoami``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import LoginThrottled, authenticate, require_principal
from hpcscope.serve.contracts import JobScopeDocument, WhoAmI
from hpcscope.serve.templating import render

router = APIRouter()


def _safe_next(next_url: str | None) -> str:
    # only local paths: never redirect off-site after login
    if next_url and next_url.startswith("/") and not next_url.startswith("//"):
        return next_url
    return "/"


@router.get("/login")
def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", {"next": _safe_next(next), "error": None}, principal=None)


@router.post("/login")
def login(
    request: Request,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/",
) -> Response:
    try:
        user = authenticate(request, username, password)
    except LoginThrottled as exc:
        return render(
            request,
            "login.html",
            {"next": _safe_next(next), "error": f"{exc}."},
            principal=None,
            status_code=429,
            headers={"Retry-After": exc.retry_after_header},
        )
    if user is None:
        return render(
            request,
            "login.html",
            {"next": _safe_next(next), "error": "Unknown user or wrong password."},
            principal=None,
            status_code=401,
        )
    request.session.clear()
    request.session["user"] = user.name
    return RedirectResponse(_safe_next(next), status_code=303)


@router.post("/logout")
def logout(request: Request) -> Response:
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


@router.get("/api/whoami")
def whoami(principal: Annotated[Principal, Depends(require_principal)]) -> WhoAmI:
    """Who the server thinks you are, and which jobs you may see."""
    scope = principal.job_scope()
    return WhoAmI(
        user=principal.name,
        role=principal.role.value,
        coordinated_accounts=sorted(principal.coordinated_accounts),
        scope=JobScopeDocument(
            all_jobs=scope.all_jobs, users=sorted(scope.users), accounts=sorted(scope.accounts)
        ),
        authenticated_by=principal.via,
        may_change=principal.may_change,
    )
