"""The FastAPI application factory.

One uvicorn worker per server (DuckDB is single-writer): the :class:`Service` lives in
``app.state.service``. Routers are listed in :data:`ROUTERS`; each page has a JSON twin.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.sessions import SessionMiddleware
from starlette.responses import Response

from hpcscope import __version__
from hpcscope.serve.auth import LoginRequired, Unauthorized
from hpcscope.serve.routes import (
    alerts,
    auth_routes,
    cluster,
    diagram,
    health,
    ingest,
    jobs,
    metrics_route,
    simulate,
    traces,
)
from hpcscope.serve.templating import STATIC_DIR
from hpcscope.service.core import Service

ROUTERS = [
    health.router,
    auth_routes.router,
    cluster.router,
    jobs.router,
    alerts.router,
    metrics_route.router,
    simulate.router,
    diagram.router,
    traces.router,
    ingest.router,
]


def create_app(
    service: Service,
    *,
    on_startup: Callable[[], None] | None = None,
    on_shutdown: Callable[[], None] | None = None,
) -> FastAPI:
    """Build the web app around an open :class:`Service`.

    Args:
        service: owns the store; the app does not close it unless ``on_shutdown`` does.
        on_startup / on_shutdown: hooks run in the lifespan (start the collector, close).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
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
        docs_url="/api/docs",
        openapi_url="/api/openapi.json",
        redoc_url=None,
    )
    app.state.service = service
    secret = service.settings.secret_key or secrets.token_urlsafe(32)
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret,
        session_cookie="hpcscope_session",
        same_site="lax",
        https_only=False,
        max_age=12 * 3600,
    )
    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse(f"/login?next={exc.next_url}", status_code=303)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized) -> Response:
        return JSONResponse(
            {"detail": "authentication required"},
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="hpcscope"'},
        )

    for router in ROUTERS:
        app.include_router(router)
    return app
