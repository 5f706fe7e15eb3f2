"""``/metrics``: hpcscope's derived series in the Prometheus text format (admins and auditors:
the series carry every job)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.metrics import metrics_registry

router = APIRouter()


@router.get("/metrics")
def metrics(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> Response:
    """Text format 0.0.4, or OpenMetrics when the scraper asks for it."""
    if not principal.job_scope().all_jobs:
        raise HTTPException(
            status_code=403, detail="/metrics carries every job: admins and auditors only"
        )
    registry = getattr(request.app.state, "metrics_registry", None)
    if registry is None:
        collector = getattr(request.app.state, "collector", None)  # None: nothing collects
        timings = collector.timings if collector is not None else None
        registry = metrics_registry(service_of(request), timings=timings)
        request.app.state.metrics_registry = registry
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(registry), media_type=content_type)
