"""The cluster overview: nodes, GPUs coloured by real efficiency, running jobs, collectors.

The per-GPU state is the diagram's live state (``service/diagram/live.py``): one implementation of
"what this viewer may see of each GPU now", whichever page draws it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.contracts import ClusterState
from hpcscope.serve.diagram.view import jsonable
from hpcscope.serve.templating import render
from hpcscope.service.diagram.live import GpuNow, Viewer, live_state

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _context(request: Request, principal: Principal) -> dict[str, Any]:
    service = service_of(request)
    state = live_state(service, Viewer(principal))
    # only the jobs with recent samples: this runs on every 5-second poll, it must not build
    # the report of every job the principal has ever run
    live = service.live_job_gpus(principal, window=service.live_window(), now=state.generated_at)
    running = [r for r in live.jobs if r.state in ("RUNNING", None) and r.gpus_observed]
    by_node: dict[str, list[GpuNow]] = {}
    for gpu in sorted(state.gpus.values(), key=lambda g: (g.node, g.gpu)):
        by_node.setdefault(gpu.node, []).append(gpu)
    return {
        "topology": service.topology,
        "state": state,
        "health": service.collection_health(now=state.generated_at),
        "by_node": by_node,
        "running": running,
    }


@router.get("/")
def overview(request: Request, principal: PrincipalDep) -> Response:
    return render(request, "overview.html", _context(request, principal), principal=principal)


@router.get("/fragments/overview")
def overview_fragment(request: Request, principal: PrincipalDep) -> Response:
    """The live part of the overview, re-rendered by htmx polling."""
    return render(request, "_overview_live.html", _context(request, principal), principal=principal)


@router.get("/api/cluster", responses={200: {"model": ClusterState}})
def cluster_json(request: Request, principal: PrincipalDep) -> dict[str, Any]:
    """Every GPU's latest state as you may see it, and the collector's health."""
    service = service_of(request)
    state = live_state(service, Viewer(principal))
    health = service.collection_health(now=state.generated_at)
    # the diagram's values, as jsonable writes them; tests/serve/test_cluster_contract.py
    # checks them against ClusterState
    return {
        "generated_at": jsonable(state.generated_at),
        "fresh_seconds": state.fresh_seconds,
        "gpus": [
            jsonable(gpu) for gpu in sorted(state.gpus.values(), key=lambda g: (g.node, g.gpu))
        ],
        **{key: value for key, value in health.to_dict().items() if key != "generated_at"},
    }
