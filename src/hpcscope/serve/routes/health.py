"""``/healthz``: liveness for probes, and ``/api/docs``: the API reference; both without
authentication and without job data (the OpenAPI document describes routes, not data)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hpcscope import __version__
from hpcscope.serve.auth import service_of
from hpcscope.serve.contracts import Health
from hpcscope.serve.templating import templates

router = APIRouter()


@router.get("/healthz")
def healthz(request: Request) -> Health:
    """Process is up and the store answers. Says nothing about jobs or users."""
    service = service_of(request)
    return Health(
        status="ok", version=__version__, store_schema_version=service.store.schema_version()
    )


@router.get("/api/docs", include_in_schema=False)
def api_docs(request: Request) -> Response:
    """The API reference: Swagger UI over ``/api/openapi.json``, served from our own static
    files (vendored, version in the file name) under the same Content-Security-Policy as
    every page, instead of FastAPI's page, which loads Swagger UI from a CDN with an inline
    script."""
    return templates.TemplateResponse(
        request, "api_docs.html", {"openapi_url": request.app.openapi_url}
    )
