"""Authentication for pages and API: a signed session cookie, or HTTP Basic for scripts.

Browsers log in on ``/login`` and carry a session cookie. The CLI and scripts send HTTP Basic
credentials on each request. A request without a valid identity gets 401 on ``/api/...`` and a
redirect to ``/login`` on pages. There is no route that returns job data without a principal.
Every password check, form or Basic, goes through :func:`authenticate`: the app's
:class:`~hpcscope.service.identity.login_guard.LoginGuard` throttles failures (429).
"""

from __future__ import annotations

import base64
import binascii
import math
from urllib.parse import quote

from fastapi import Request

from hpcscope.model.access import Principal
from hpcscope.model.errors import AccessError
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import diagram_viewer
from hpcscope.service.identity.login_guard import LoginGuard
from hpcscope.service.identity.users import UserRecord


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


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


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


def identify(request: Request) -> Principal | None:
    """The principal behind this request, or None when anonymous."""
    service = service_of(request)
    credentials = _basic_credentials(request)
    if credentials is not None:
        user = authenticate(request, *credentials)
        return service.principal(user.name) if user is not None else None
    name = request.session.get("user") if "session" in request.scope else None
    if isinstance(name, str):
        return service.principal(name)
    return None


def _is_api(request: Request) -> bool:
    path = request.url.path
    return path.startswith("/api/") or path.endswith(".json") or path == "/metrics"


def require_principal(request: Request) -> Principal:
    """FastAPI dependency: the authenticated principal, or 401 / redirect to login."""
    principal = identify(request)
    if principal is None:
        if _is_api(request):
            raise Unauthorized()
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(quote(target, safe="/?=&"))
    return principal


def optional_principal(request: Request) -> Principal | None:
    """FastAPI dependency for pages that anonymous visitors may see in part."""
    return identify(request)


def site_viewer(request: Request) -> Principal | None:
    """FastAPI dependency for the pages a site may open to anonymous visitors (the diagram,
    the step player, the simulator): anyone when ``anonymous_diagram`` is on — None stands for
    the anonymous visitor — else the authenticated principal (401 / login redirect)."""
    viewer = diagram_viewer(service_of(request).settings, identify(request))
    if viewer is None:
        return require_principal(request)  # raises LoginRequired (page) or Unauthorized (API)
    return viewer.principal
