"""API tokens: the ``/tokens`` page and its JSON twin ``/api/tokens`` (``docs/identity.md``).

``GET /tokens`` lists your tokens (an admin's and an auditor's page: everyone's) with a form to
create one; the new secret is shown once, on the page the form returns. ``POST /tokens`` and
``POST /tokens/{id}/revoke`` are the page's forms (session and CSRF rules as for every form).
``GET /api/tokens``, ``POST /api/tokens`` (JSON ``{"label", "scope", "expires_days"}``; an admin
may add ``"user"``) and ``POST /api/tokens/{id}/revoke`` are the API the CLI calls.

Rules (:class:`~hpcscope.service.identity.tokens.ApiTokens`): scope ``read`` for anyone, scope
``admin`` for an admin only; a read-only token cannot create tokens (it may revoke itself and
its user's others); an auditor creates read tokens and revokes its own; an admin revokes any.
Another user's token is 404 to everyone but admins and auditors (no probing).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal, TokenScope
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import api_tokens, require_principal
from hpcscope.serve.body import body_fields
from hpcscope.serve.templating import render
from hpcscope.service.identity.contracts import CreatedTokenDocument, TokenDocument, TokenList
from hpcscope.service.identity.tokens import (
    CreatedToken,
    TokenGrantDenied,
    TokenRequestError,
    may_revoke,
)

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]

#: Expiry of a token when none is asked for, days.
DEFAULT_EXPIRES_DAYS = 90.0


def _list(request: Request, principal: Principal) -> TokenList:
    now = utcnow()
    found = [TokenDocument.of(t, now=now) for t in api_tokens(request).visible_to(principal)]
    return TokenList(count=len(found), tokens=found)


# A request body as the client sent it (JSON of any shape, or a form): each field is checked
# where it is read, with the client's value named in the refusal.
_Fields = dict[str, Any]


def _create(principal: Principal, request: Request, fields: _Fields) -> CreatedToken:
    """Raises TokenGrantDenied, TokenRequestError."""
    try:
        scope = TokenScope(str(fields.get("scope") or "read").strip().lower())
    except ValueError:
        raise TokenRequestError(f"unknown scope {fields.get('scope')!r} (read or admin)") from None
    raw_days = fields.get("expires_days")
    try:
        days = float(raw_days) if raw_days not in (None, "") else DEFAULT_EXPIRES_DAYS
    except (TypeError, ValueError):
        raise TokenRequestError(f"expires_days must be a number, not {raw_days!r}") from None
    user = str(fields.get("user") or "").strip() or None
    return api_tokens(request).create(
        principal,
        scope=scope,
        label=str(fields.get("label") or ""),
        expires_days=days,
        now=utcnow(),
        for_user=user,
    )


async def _fields(request: Request) -> _Fields:
    return await body_fields(request)


def _page(
    request: Request,
    principal: Principal,
    *,
    created: CreatedTokenDocument | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    listing = _list(request, principal)
    return render(
        request,
        "tokens.html",
        {
            "listing": listing,
            "revocable": {
                t.token_id
                for t in api_tokens(request).visible_to(principal)
                if may_revoke(principal, t)
            },
            "may_create": principal.may_grant(TokenScope.READ),
            "created": created,
            "error": error,
            "may_create_admin": principal.may_grant(TokenScope.ADMIN),
            "default_days": DEFAULT_EXPIRES_DAYS,
            "max_days": api_tokens(request).max_days,
        },
        principal=principal,
        status_code=status,
    )


@router.get("/tokens")
def tokens_page(request: Request, principal: PrincipalDep, error: str | None = None) -> Response:
    return _page(request, principal, error=error)


@router.get("/api/tokens")
def tokens_json(request: Request, principal: PrincipalDep) -> TokenList:
    """Your API tokens (admins and auditors: everyone's), newest first; never a secret."""
    return _list(request, principal)


@router.post("/tokens")
async def create_page(request: Request, principal: PrincipalDep) -> Response:
    """The page's form: create a token and show its secret once (never a redirect: the secret
    must not land in a URL or the history)."""
    fields = await _fields(request)
    try:
        made = await run_in_threadpool(_create, principal, request, fields)
    except TokenGrantDenied as exc:
        return _page(request, principal, error=str(exc), status=403)
    except TokenRequestError as exc:
        return _page(request, principal, error=str(exc), status=400)
    document = CreatedTokenDocument(
        secret=made.secret, token=TokenDocument.of(made.token, now=utcnow())
    )
    response = _page(request, principal, created=document, status=201)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/api/tokens", status_code=201, response_model=CreatedTokenDocument)
async def create_json(request: Request, principal: PrincipalDep) -> Response:
    """Create a token (``label``; ``scope`` read|admin, default read; ``expires_days``, default
    90; admins: ``user``). 201 with the secret, shown this once; 403 above your role; 400 for
    a bad request."""
    fields = await _fields(request)
    try:
        made = await run_in_threadpool(_create, principal, request, fields)
    except TokenGrantDenied as exc:
        return JSONResponse({"detail": str(exc)}, status_code=403)
    except TokenRequestError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=400)
    document = CreatedTokenDocument(
        secret=made.secret, token=TokenDocument.of(made.token, now=utcnow())
    )
    return JSONResponse(
        document.model_dump(mode="json"), status_code=201, headers={"Cache-Control": "no-store"}
    )


def _revoke(request: Request, principal: Principal, token_id: str) -> tuple[int, Any]:
    try:
        revoked = api_tokens(request).revoke(principal, token_id, now=utcnow())
    except TokenGrantDenied as exc:
        return 403, str(exc)
    if revoked is None:
        return 404, "no such token visible to you"
    return 200, TokenDocument.of(revoked, now=utcnow())


@router.post("/tokens/{token_id}/revoke")
async def revoke_page(request: Request, token_id: str, principal: PrincipalDep) -> Response:
    status, result = await run_in_threadpool(_revoke, request, principal, token_id)
    if status != 200:
        return RedirectResponse(f"/tokens?error={quote(str(result))}", status_code=303)
    return RedirectResponse("/tokens", status_code=303)


@router.post("/api/tokens/{token_id}/revoke", response_model=TokenDocument)
async def revoke_json(request: Request, token_id: str, principal: PrincipalDep) -> Response:
    """Revoke a token (yours; an admin: anyone's). 404 for a token you cannot list, 403 for
    one you list but may not revoke (an auditor, another user's)."""
    status, result = await run_in_threadpool(_revoke, request, principal, token_id)
    if status != 200:
        return JSONResponse({"detail": result}, status_code=status)
    return JSONResponse(result.model_dump(mode="json"))
