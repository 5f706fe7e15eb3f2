"""The cluster overview: nodes, GPUs coloured by real efficiency, running jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render

router = APIRouter()


@router.get("/")
def overview(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> Response:
    service = service_of(request)
    return render(request, "overview.html", {"topology": service.topology}, principal=principal)
