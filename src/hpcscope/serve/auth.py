"""Authentication for pages and API: a session cookie, HTTP Basic, an API token, or a proxy.

In the order :func:`identify` tries them:

1. **A trusted SSO proxy's header** (``proxy_auth_header``), moved into the scope by
   :mod:`hpcscope.serve.edge` only for connections from ``proxy_auth_addresses``.
2. **An API token**, ``Authorization: Bearer hps_...``, on API routes only (``/api/...``,
   ``*.json``, ``/metrics``): a page never takes one, so a token pasted into a browser session
   opens nothing, and HTML forms keep the session and its CSRF rule.
3. **HTTP Basic** from the CLI and scripts, on each request.
4. **The session cookie** of a browser that logged in on ``/login``.

Credentials that were sent and fail are a 401 (no fall-back to the session). A request without
a valid identity gets 401 on ``/api/...`` and a redirect to ``/login`` on pages. There is no
route that returns job data without a principal. Every password check, form or Basic, goes
through :func:`authenticate`: the app's
:class:`~hpcscope.service.identity.login_guard.LoginGuard` throttles failures (429).

A principal that may change nothing (a ``read`` token, an auditor) gets 403 on every
state-changing request in :func:`require_principal`, one place for every route, except its own
API tokens' routes (``/tokens``, ``/api/tokens``), which check their own rules.

The dependencies (:func:`require_principal`, :func:`optional_principal`, :func:`site_viewer`)
are async: a session cookie, a proxy's header, and HTTP Basic credentials or an API token
verified in the last minute resolve from memory on the event loop
(:func:`hpcscope.serve.offload.answer`, no thread-pool hop); a password or token check still to
do (scrypt, a store query), or any other snapshot miss, runs the same sync rule
(:func:`check_principal`, :func:`identify`, :func:`check_site_viewer`) in a worker thread.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar
from urllib.parse import quote

from fastapi import Request

from hpcscope.model.access import Principal
from hpcscope.model.errors import AccessError
from hpcscope.model.timeutil import utcnow
from hpcscope.model.tokens import PREFIX as TOKEN_PREFIX
from hpcscope.serve.edge import PROXY_USER_KEY, SAFE_METHODS
from hpcscope.serve.offload import resolve
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import diagram_viewer
from hpcscope.service.identity.login_guard import LoginGuard
from hpcscope.service.identity.tokens import ApiTokens, token_principal
from hpcscope.service.identity.users import UserRecord

_T = TypeVar("_T")

#: Paths where a principal that changes nothing may still post: its own API tokens.
CREDENTIAL_PATHS = ("/tokens", "/api/tokens")


class LoginRequired(AccessError):
    """Raised by page dependencies; turned into a redirect to /login."""

    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


class Unauthorized(AccessError):
    """Raised by API dependencies; turned into 401 (a Basic challenge only for a client that
    sent Basic credentials: a browser never pops its password dialog on an API URL)."""


class LoginThrottled(AccessError):
    """Too many failed logins for this user name or address; turned into 429."""

    def __init__(self, retry_after_seconds: float) -> None:
        super().__init__(f"too many failed logins: retry in {math.ceil(retry_after_seconds)} s")
        self.retry_after_seconds = retry_after_seconds

    @property
    def retry_after_header(self) -> str:
        """The ``Retry-After`` value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_seconds)))


class ReadOnlyPrincipal(AccessError, PermissionError):
    """A state-changing request by a principal that changes nothing (a ``read`` API token, an
    auditor); turned into 403."""


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def api_tokens(request: Request) -> ApiTokens:
    """The app's API tokens (``app.state.api_tokens``)."""
    tokens: ApiTokens = request.app.state.api_tokens
    return tokens


def login_guard(request: Request) -> LoginGuard:
    """The app's failed-login throttle (``app.state.login_guard``)."""
    guard: LoginGuard = request.app.state.login_guard
    return guard


def client_address(request: Request) -> str:
    """The client's address (a trusted proxy's forwarded one, see :mod:`hpcscope.serve.edge`)."""
    return request.client.host if request.client else "unknown"


def authenticate(request: Request, name: str, password: str) -> UserRecord | None:
    """Check a user name and password under the login throttle.

    Raises:
        LoginThrottled: the name or the client address is locked out; no password is checked.
    """
    guard, address = login_guard(request), client_address(request)
    wait = guard.retry_after_seconds(name, address)
    if wait > 0:
        raise LoginThrottled(wait)
    user = service_of(request).users.authenticate(name, password)
    if user is None:
        guard.record_failure(name, address)
    else:
        guard.record_success(name)
    return user


def sent_basic(request: Request) -> bool:
    """Whether the client sent HTTP Basic credentials (and may be answered a Basic challenge)."""
    scheme, _, _ = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "basic"


def _basic_credentials(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    return (name, password) if sep else None


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _token_principal(request: Request, secret: str) -> Principal | None:
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token = api_tokens(request).authenticate(secret, now=utcnow(), address=client_address(request))
    if token is None:
        return None
    user = service_of(request).principal(token.user, slurm_users=True)
    return token_principal(token, user) if user is not None else None


def identify(request: Request) -> Principal | None:
    """The principal behind this request, or None when anonymous or the credentials sent
    fail (module docstring: proxy header, token, Basic, session)."""
    service = service_of(request)
    proxy_user = request.scope.get(PROXY_USER_KEY)
    if isinstance(proxy_user, str):
        principal = service.principal(proxy_user, slurm_users=True)
        return replace(principal, via="proxy") if principal is not None else None
    bearer = _bearer(request)
    if bearer is not None and _is_api(request):
        return _token_principal(request, bearer)
    credentials = _basic_credentials(request)
    if credentials is not None:
        user = authenticate(request, *credentials)
        principal = service.principal(user.name) if user is not None else None
        return replace(principal, via="basic") if principal is not None else None
    name = request.session.get("user") if "session" in request.scope else None
    if isinstance(name, str):
        return service.principal(name)
    return None


def _is_api(request: Request) -> bool:
    # the scope's path: ``request.url`` parses a whole URL (host header included), a tenth of
    # the event loop's time per request under load
    path: str = request.scope["path"]
    return path.startswith("/api/") or path.endswith(".json") or path == "/metrics"


def check_principal(request: Request) -> Principal:
    """The authenticated principal, or 401 / redirect to login (:func:`require_principal`)."""
    principal = identify(request)
    if principal is None:
        if _is_api(request):
            raise Unauthorized()
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(quote(target, safe="/?=&"))
    if (
        request.method not in SAFE_METHODS
        and not principal.may_change
        and not _manages_credentials(request.url.path)
    ):
        kind = "a read-only API token" if principal.read_only else f"an {principal.role.value}"
        raise ReadOnlyPrincipal(f"{kind} changes nothing")
    return principal


def _manages_credentials(path: str) -> bool:
    return any(path == base or path.startswith(base + "/") for base in CREDENTIAL_PATHS)


def check_site_viewer(request: Request) -> Principal | None:
    """Anyone when ``anonymous_diagram`` is on — None stands for the anonymous visitor — else
    the authenticated principal (401 / login redirect); see :func:`site_viewer`."""
    viewer = diagram_viewer(service_of(request).settings, identify(request))
    if viewer is None:
        return check_principal(request)  # raises LoginRequired (page) or Unauthorized (API)
    return viewer.principal


async def _resolved(request: Request, rule: Callable[[Request], _T]) -> _T:
    return await resolve(rule, request)


async def require_principal(request: Request) -> Principal:
    """FastAPI dependency: the authenticated principal, or 401 / redirect to login
    (:func:`check_principal`)."""
    return await _resolved(request, check_principal)


async def optional_principal(request: Request) -> Principal | None:
    """FastAPI dependency for pages that anonymous visitors may see in part."""
    return await _resolved(request, identify)


async def site_viewer(request: Request) -> Principal | None:
    """FastAPI dependency for the pages a site may open to anonymous visitors (the diagram,
    the step player, the simulator): :func:`check_site_viewer`."""
    return await _resolved(request, check_site_viewer)
