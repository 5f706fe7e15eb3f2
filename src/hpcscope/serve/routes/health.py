"""``/healthz``: liveness for probes, without authentication and without job data."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hpcscope import __version__
from hpcscope.serve.auth import service_of
from hpcscope.serve.contracts import Health

router = APIRouter()


@router.get("/healthz")
def healthz(request: Request) -> Health:
    """Process is up and the store answers. Says nothing about jobs or users."""
    service = service_of(request)
    return Health(
        status="ok", version=__version__, store_schema_version=service.store.schema_version()
    )
