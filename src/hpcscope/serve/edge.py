"""The web edge: one ASGI middleware in front of every route, static file and error.

In order, for each HTTP request:

1. **Trusted proxies.** From an address in ``trusted_proxies`` only, ``X-Forwarded-Proto:
   https`` makes the request's scheme ``https`` and the last ``X-Forwarded-For`` entry its
   client address (rate limit, audit). From anybody else both headers are ignored.
2. **Proxy identity.** With ``proxy_auth_header`` set, that header (the user an SSO/OIDC proxy
   authenticated) is believed only on a connection from ``proxy_auth_addresses`` (the peer
   itself, not a forwarded address): the edge moves it into the scope as
   :data:`PROXY_USER_KEY` for :mod:`hpcscope.serve.auth`. From any other address, or sent
   twice, it is a 401 and a warning: a spoofing attempt, or a proxy missing from the list.
3. **CSRF.** A state-changing request (anything but GET, HEAD, OPTIONS, TRACE) must come from
   the server's own origin (``scheme://Host``) or one of ``trusted_origins``: its ``Origin``
   header, or without one its ``Referer``, is compared strictly; ``Origin: null`` and any other
   origin get 403. A request with neither header is let through only when it carries no cookie:
   scripts, the CLI and Falco authenticate with HTTP Basic or a bearer token on each request,
   and have no ambient credential a foreign page could borrow. The proxy's identity header is
   ambient too (the proxy adds it to whatever the browser sends): it counts as a cookie here.
   Being a middleware, a route added later cannot forget it. Session cookies are also
   ``SameSite=Lax``.
4. **Cookies.** Over HTTPS (TLS here, or a trusted proxy that says so) the session cookie gets
   ``Secure``; it is always ``HttpOnly`` and ``SameSite=Lax`` (Starlette's session middleware).
5. **Body size.** A request body is at most ``max_body_bytes`` (1 MiB: forms, JSON, a Falco
   alert batch) except on the upload routes, which stream under their own limits
   (:mod:`hpcscope.serve.uploads`): a larger declared ``Content-Length`` is 413 at once, and a
   chunked body is counted as it arrives (held, at most that much, then handed on).
6. **Headers** on every response: a Content-Security-Policy without inline script
   (``script-src 'self'``, ``frame-ancestors 'none'``), ``X-Content-Type-Options: nosniff``,
   ``Referrer-Policy: same-origin``, ``X-Frame-Options: DENY``; ``Strict-Transport-Security``
   over HTTPS. A response that sets one of them itself keeps its own.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

#: Scope key of the user name a trusted proxy authenticated (set by the edge only).
PROXY_USER_KEY = "hpcscope.proxy_user"

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

#: The policy of every page: scripts and styles from our own static files only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
STRICT_TRANSPORT_SECURITY = "max-age=31536000"
#: Largest request body outside the upload routes: forms, JSON, a Falco alert batch.
MAX_BODY_BYTES = 1 << 20


def _networks(entries: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


class EdgeMiddleware:
    """Proxy trust, CSRF origin check, Secure cookies and security headers (module docstring).

    Args:
        app: the wrapped ASGI app (the session middleware and the routes).
        trusted_proxies: addresses or networks whose forwarded headers are believed.
        trusted_origins: origins besides the server's own allowed to send state changes.
        session_cookie: name of the cookie that gets ``Secure`` over HTTPS.
        max_body_bytes: largest request body outside ``streamed_paths``.
        streamed_paths: paths whose bodies are streamed and limited by the route (uploads).
        proxy_auth_header: header naming the user a trusted SSO proxy authenticated; None: off.
        proxy_auth_addresses: peers allowed to send ``proxy_auth_header``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        trusted_proxies: Iterable[str] = (),
        trusted_origins: Iterable[str] = (),
        session_cookie: str = "hpcscope_session",
        max_body_bytes: int = MAX_BODY_BYTES,
        streamed_paths: Iterable[str] = ("/traces", "/api/traces"),
        proxy_auth_header: str | None = None,
        proxy_auth_addresses: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.trusted_proxies = _networks(trusted_proxies)
        self.trusted_origins = frozenset(o.rstrip("/").lower() for o in trusted_origins)
        self.cookie_prefix = f"{session_cookie}=".encode("latin-1")
        self.max_body_bytes = max_body_bytes
        self.streamed_paths = frozenset(streamed_paths)
        self.proxy_auth_header = (
            proxy_auth_header.lower().encode("latin-1") if proxy_auth_header else None
        )
        self.proxy_auth_addresses = _networks(proxy_auth_addresses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _header_map(scope)
        proxy_user, proxy_refusal = self._proxy_identity(scope)
        if self._from_trusted_proxy(scope):
            scope = _forwarded(scope, headers)
        if proxy_user is not None:
            scope = dict(scope)
            scope[PROXY_USER_KEY] = proxy_user
        https = scope.get("scheme") == "https"
        policy = CONTENT_SECURITY_POLICY

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = self._response_headers(
                    list(message.get("headers", [])), policy=policy, https=https
                )
            await send(message)

        if proxy_refusal is not None:
            await _refuse(send_with_headers, 401, proxy_refusal)
            return
        refusal = self._csrf_refusal(scope, headers)
        if refusal is not None:
            await _refuse(send_with_headers, 403, refusal)
            return
        if scope.get("method") not in SAFE_METHODS and scope.get("path") not in self.streamed_paths:
            declared = headers.get(b"content-length", b"")
            too_large = f"request body over {self.max_body_bytes} bytes"
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                await _refuse(send_with_headers, 413, too_large)
                return
            if not declared:
                held = await self._hold_body(receive)
                if held is None:
                    await _refuse(send_with_headers, 413, too_large)
                    return
                receive = _replay(held, receive)
        await self.app(scope, receive, send_with_headers)

    async def _hold_body(self, receive: Receive) -> list[Message] | None:
        """A body without a declared length, read up to the limit; None past it."""
        messages: list[Message] = []
        total = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            total += len(message.get("body", b""))
            if total > self.max_body_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    def _proxy_identity(self, scope: Scope) -> tuple[str | None, str | None]:
        """The user name a trusted proxy vouches for, and why the request is refused."""
        if self.proxy_auth_header is None:
            return None, None
        values = [v for n, v in scope.get("headers", []) if n.lower() == self.proxy_auth_header]
        if not values:
            return None, None
        client = scope.get("client")
        peer = client[0] if client else "unknown"
        header = self.proxy_auth_header.decode("latin-1")
        if not _peer_in(scope, self.proxy_auth_addresses):
            log.warning("identity header %s from untrusted address %s refused", header, peer)
            return None, f"{header} is accepted only from the configured proxies"
        name = values[0].decode("latin-1").strip()
        if len(values) > 1 or not name or len(name) > 256:
            log.warning("identity header %s from %s refused: sent twice or empty", header, peer)
            return None, f"{header} must be sent once, with a user name"
        return name, None

    def _from_trusted_proxy(self, scope: Scope) -> bool:
        return _peer_in(scope, self.trusted_proxies)

    def own_origin(self, scope: Scope, headers: dict[bytes, bytes]) -> str:
        """``scheme://host[:port]`` as the browser addressed this server."""
        host = headers.get(b"host", b"").decode("latin-1").lower()
        return f"{scope.get('scheme', 'http')}://{host}"

    def _csrf_refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> str | None:
        """Why a state-changing request is refused, or None when it may proceed."""
        if scope.get("method", "GET") in SAFE_METHODS:
            return None
        allowed = self.trusted_origins | {self.own_origin(scope, headers)}
        origin = headers.get(b"origin")
        if origin is not None:
            value = origin.decode("latin-1").rstrip("/").lower()
            if value in allowed:
                return None
            return f"cross-site request refused: Origin {value!r} is not this server's"
        referer = headers.get(b"referer")
        if referer is not None:
            parts = urlsplit(referer.decode("latin-1"))
            value = f"{parts.scheme}://{parts.netloc}".lower()
            if value in allowed:
                return None
            return f"cross-site request refused: Referer from {value!r} is not this server"
        if b"cookie" in headers:
            return "cross-site request refused: a cookie but neither Origin nor Referer"
        if self.proxy_auth_header is not None and self.proxy_auth_header in headers:
            return "cross-site request refused: a proxy identity but neither Origin nor Referer"
        return None

    def _response_headers(
        self, headers: list[tuple[bytes, bytes]], *, policy: str, https: bool
    ) -> list[tuple[bytes, bytes]]:
        present = {name.lower() for name, _ in headers}
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if (
                https
                and name.lower() == b"set-cookie"
                and value.startswith(self.cookie_prefix)
                and b"secure" not in [part.strip() for part in value.lower().split(b";")]
            ):
                value += b"; secure"
            out.append((name, value))
        wanted = [
            (b"content-security-policy", policy.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
            (b"x-frame-options", b"DENY"),
        ]
        if https:
            wanted.append((b"strict-transport-security", STRICT_TRANSPORT_SECURITY.encode()))
        out.extend((name, value) for name, value in wanted if name not in present)
        return out


def _peer_in(
    scope: Scope, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    """Whether the connection's peer (not a forwarded address) is in one of ``networks``."""
    client = scope.get("client")
    if not networks or not client:
        return False
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return False
    return any(address in network for network in networks)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive channel that gives the held messages first, then the real one."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _header_map(scope: Scope) -> dict[bytes, bytes]:
    """Request headers by lower-case name (the first of repeated ones)."""
    out: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        out.setdefault(name.lower(), value)
    return out


def _forwarded(scope: Scope, headers: dict[bytes, bytes]) -> Scope:
    """The scope as the trusted proxy's client sent it: scheme and client address."""
    scope = dict(scope)
    proto = headers.get(b"x-forwarded-proto", b"").decode("latin-1").split(",")[-1].strip()
    if proto.lower() in ("http", "https"):
        scope["scheme"] = proto.lower()
    chain = headers.get(b"x-forwarded-for", b"").decode("latin-1")
    hops = [hop.strip() for hop in chain.split(",") if hop.strip()]
    if hops:
        scope["client"] = (hops[-1], 0)
    return scope
