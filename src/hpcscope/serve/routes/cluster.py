"""The cluster overview: nodes, GPUs coloured by real efficiency, running jobs, collectors."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _context(request: Request, principal: Principal) -> dict[str, Any]:
    service = service_of(request)
    state = service.cluster_state(principal)
    running = [
        r
        for r in service.job_reports(principal)
        if r.state in ("RUNNING", None) and r.gpus_observed
    ]
    by_node: dict[str, list[Any]] = {}
    for gpu in state.gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    return {"topology": service.topology, "state": state, "by_node": by_node, "running": running}


@router.get("/")
def overview(request: Request, principal: PrincipalDep) -> Response:
    return render(request, "overview.html", _context(request, principal), principal=principal)


@router.get("/fragments/overview")
def overview_fragment(request: Request, principal: PrincipalDep) -> Response:
    """The live part of the overview, re-rendered by htmx polling."""
    return render(request, "_overview_live.html", _context(request, principal), principal=principal)


@router.get("/api/cluster")
def cluster_json(request: Request, principal: PrincipalDep) -> dict[str, Any]:
    """Every GPU's latest state as you may see it, and the collector's health."""
    return service_of(request).cluster_state(principal).to_dict()
