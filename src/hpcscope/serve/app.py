"""The FastAPI application factory.

One uvicorn worker per server (DuckDB is single-writer): the :class:`Service` lives in
``app.state.service``. Routers are listed in :data:`ROUTERS`; each page has a JSON twin.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from hpcscope import __version__
from hpcscope.serve.auth import (
    LoginRequired,
    LoginThrottled,
    ReadOnlyPrincipal,
    Unauthorized,
    sent_basic,
)
from hpcscope.serve.body import BodyRefused
from hpcscope.serve.edge import EdgeMiddleware
from hpcscope.serve.read_lane import ReadLane
from hpcscope.serve.routes import (
    access,
    alerts,
    auth_routes,
    chargeback,
    cluster,
    diagram,
    health,
    ingest,
    jobs,
    metrics_route,
    notify,
    simulate,
    slo,
    tokens,
    traces,
)
from hpcscope.serve.session_cookie import SessionMiddleware
from hpcscope.serve.templating import STATIC_DIR, render
from hpcscope.service.backends import MetricsBackendError
from hpcscope.service.core import Service
from hpcscope.service.identity.login_guard import LoginGuard
from hpcscope.service.identity.tokens import ApiTokens

SESSION_COOKIE = "hpcscope_session"

# Matched in this order on every request (each router's routes in turn, twice: FastAPI's
# include matching, then its dispatch): the most read first, the job list and pages and the
# diagram's live poll and page (bench/api_load.py). No path of a router matches a route of
# another, so the order changes no answer (tests/serve/test_route_order.py).
ROUTERS = [
    health.router,
    jobs.router,
    diagram.router,
    auth_routes.router,
    cluster.router,
    alerts.router,
    metrics_route.router,
    simulate.router,
    traces.router,
    ingest.router,
    tokens.router,
    notify.router,
    slo.router,
    chargeback.router,
    access.router,
]

#: What the read lane answers past the framework (``serve/read_lane.py``): every route a page
#: or a script polls, each module's own functions (``serve/kept.py``).
LANE_ROUTES = (
    *jobs.LANE_ROUTES,
    *diagram.LANE_ROUTES,
    *cluster.LANE_ROUTES,
    *slo.LANE_ROUTES,
    *chargeback.LANE_ROUTES,
    *alerts.LANE_ROUTES,
    *access.LANE_ROUTES,
    *traces.LANE_ROUTES,
)


def limit_worker_threads(most: int) -> None:
    """At most ``most`` worker threads for this event loop's offloaded calls (settings
    ``worker_threads``): they compute under the interpreter lock, so more only queue for it."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = most


def create_app(
    service: Service,
    *,
    on_startup: Callable[[], None] | None = None,
    on_shutdown: Callable[[], None] | None = None,
    read_lane: bool = True,
) -> FastAPI:
    """Build the web app around an open :class:`Service`.

    Args:
        service: owns the store; the app does not close it unless ``on_shutdown`` does.
        on_startup / on_shutdown: hooks run in the lifespan (start the collector, close).
        read_lane: answer the most read routes from the snapshots past the framework
            (``serve/read_lane.py``; off only to compare answers in tests).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the worker threads of this event loop (anyio's, which FastAPI and the offloads use)
        limit_worker_threads(service.settings.worker_threads)
        service.users.warm_up()
        if on_startup is not None:
            on_startup()
        try:
            yield
        finally:
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(
        title="hpcscope",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # our own page: vendored Swagger UI, no CDN, no inline script
        openapi_url="/api/openapi.json",
        redoc_url=None,
        # no OpenTelemetry provider is configured in the server: without this, FastAPI asks
        # the environment whether one is, on every request
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.service = service
    settings = service.settings
    app.state.login_guard = LoginGuard(max_failures=settings.login_failures_per_minute)
    app.state.api_tokens = ApiTokens(service.store, max_days=settings.api_token_max_days)
    secret = settings.secret_key or secrets.token_urlsafe(32)
    if read_lane:  # added first, so innermost: behind the edge and the session cookie
        app.add_middleware(ReadLane, routes=LANE_ROUTES)
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret,
        session_cookie=SESSION_COOKIE,
        same_site="lax",
        # Secure is added per request by EdgeMiddleware when the request came over HTTPS
        https_only=False,
        max_age=12 * 3600,
    )
    # added last, so outermost: its headers and CSRF check cover every route, static file
    # and error response
    app.add_middleware(
        EdgeMiddleware,
        trusted_proxies=settings.trusted_proxies,
        trusted_origins=settings.trusted_origins,
        session_cookie=SESSION_COOKIE,
        proxy_auth_header=settings.proxy_auth_header,
        proxy_auth_addresses=settings.proxy_auth_addresses,
    )
    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse(f"/login?next={exc.next_url}", status_code=303)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized) -> Response:
        # a challenge only for a client that asked for Basic: else a browser pops its own
        # password dialog on an API URL
        challenge = {"WWW-Authenticate": 'Basic realm="hpcscope"'} if sent_basic(request) else {}
        return JSONResponse(
            {"detail": "authentication required"}, status_code=401, headers=challenge
        )

    @app.exception_handler(ReadOnlyPrincipal)
    async def _read_only(request: Request, exc: ReadOnlyPrincipal) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=403)

    @app.exception_handler(BodyRefused)
    async def _body_refused(request: Request, exc: BodyRefused) -> Response:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(LoginThrottled)
    async def _throttled(request: Request, exc: LoginThrottled) -> Response:
        return JSONResponse(
            {"detail": str(exc)},
            status_code=429,
            headers={"Retry-After": exc.retry_after_header},
        )

    @app.exception_handler(MetricsBackendError)
    async def _engine_down(request: Request, exc: MetricsBackendError) -> Response:
        # a page whose GPU figures the engine cannot give says so, never a zero
        reason = str(exc)
        if request.url.path.startswith("/api/") or "text/html" not in request.headers.get(
            "accept", ""
        ):
            body = {"detail": f"the metrics engine did not answer: {reason}"}
            return JSONResponse({**body, "unavailable": "gpu_metrics"}, status_code=503)
        return render(
            request,
            "engine_down.html",
            {"reason": reason},
            principal=None,
            status_code=503,
        )

    for router in ROUTERS:
        app.include_router(router)
    return app
