"""The cluster overview: nodes, GPUs coloured by real efficiency, running jobs, collectors.

The per-GPU state is the diagram's live state (``service/diagram/live.py``): one implementation of
"what this viewer may see of each GPU now", whichever page draws it.

Every tab of the overview polls its live part every 5 seconds, and scripts poll
``/api/cluster``: all three are kept answers (``serve/kept.py``). The overview's data is computed
once per data generation for every viewer who sees the same (:meth:`Viewer.visibility`), the
page and the fragment rendered once per principal (their name is on the page) and data, the
document serialised once per visibility; requests are answered on the event loop, and past the
framework by the read lane.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from fastapi import APIRouter, Depends, Request
from markupsafe import Markup
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.topology import Topology
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.contracts import ClusterState
from hpcscope.serve.diagram.view import jsonable
from hpcscope.serve.kept import (
    Document,
    Page,
    cached_json,
    kept_document,
    kept_page,
    kept_page_parts,
    page_key,
    page_response,
)
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render
from hpcscope.service.diagram.live import (
    GpuNow,
    LiveState,
    Viewer,
    kept_live_state,
    running_jobs,
)
from hpcscope.service.jobs.reports import CollectionHealth, JobReport

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]

#: Collection gaps the overview lists, the latest (``/api/cluster`` lists the latest
#: :data:`~hpcscope.service.jobs.reports.HEALTH_GAPS`, both count the hour's): a collector
#: stalled by load leaves one per target, thousands an hour at 128 nodes.
OVERVIEW_GAPS = 20


class _Overview(TypedDict):
    """The overview's data for one visibility: what its templates and ``/api/cluster`` show."""

    topology: Topology
    state: LiveState
    health: CollectionHealth
    by_node: dict[str, list[GpuNow]]
    running: list[JobReport]


def _context(request: Request, principal: Principal) -> _Overview:
    """The overview's data for the principal's visibility, once per generation."""
    service = service_of(request)
    viewer = Viewer(principal)

    def compute() -> _Overview:
        state = kept_live_state(service, viewer)
        running = running_jobs(service, principal, now=state.generated_at)
        by_node: dict[str, list[GpuNow]] = {}
        for gpu in sorted(state.gpus.values(), key=lambda g: (g.node, g.gpu)):
            by_node.setdefault(gpu.node, []).append(gpu)
        return {
            "topology": service.topology,
            "state": state,
            # no job data in it: one for every visibility, held once
            "health": service.snapshots.get(
                ("serve.collection_health",),
                lambda: service.collection_health(now=state.generated_at),
            ),
            "by_node": by_node,
            "running": running,
        }

    context: _Overview = service.snapshots.get(
        ("serve.overview_context", viewer.visibility()), compute
    )
    return context


def _overview(request: Request, principal: Principal, template: str) -> Response:
    if template == "_overview_live.html":  # names nobody: one per visibility
        return page_response(request, _live_fragment(request, principal))

    def page() -> Response:
        # the live part as it is kept for the viewer's visibility (rendered once for all who
        # see the same, half a megabyte at 128 nodes), not rendered again for each reader
        _, fragment, _ = _live_fragment(request, principal)
        context = {**_context(request, principal), "live_html": Markup(fragment.decode())}
        return render(request, template, context, principal=principal)

    # the page names its reader
    return kept_page(request, ("serve.overview", template, page_key(principal)), page)


def _live_fragment(request: Request, principal: Principal) -> Page:
    """The live part (``_overview_live.html``) kept for the principal's visibility: it names
    nobody."""

    def fragment() -> Response:
        context = {**_context(request, principal), "gaps_shown": OVERVIEW_GAPS}
        return render(request, "_overview_live.html", context, principal=principal)

    key = ("serve.overview", "_overview_live.html", Viewer(principal).visibility())
    return kept_page_parts(request, key, fragment)


@router.get("/")
async def overview(request: Request, principal: PrincipalDep) -> Response:
    return await answer(_overview, request, principal, "overview.html")


@router.get("/fragments/overview")
async def overview_fragment(request: Request, principal: PrincipalDep) -> Response:
    """The live part of the overview, re-rendered by htmx polling."""
    return await answer(_overview, request, principal, "_overview_live.html")


def _cluster_document(request: Request, principal: Principal) -> Document:
    def document() -> dict[str, object]:
        context = _context(request, principal)
        state, health = context["state"], context["health"]
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

    return kept_document(request, ("serve.cluster_json", Viewer(principal).visibility()), document)


@router.get("/api/cluster", responses={200: {"model": ClusterState}})
async def cluster_json(request: Request, principal: PrincipalDep) -> Response:
    """Every GPU's latest state as you may see it, and the collector's health."""
    return await answer(_cluster_json, request, principal)


def _cluster_json(request: Request, principal: Principal) -> Response:
    return cached_json(request, *_cluster_document(request, principal))


#: What the read lane answers past the framework (``serve/read_lane.py``): these routes' own
#: functions, after :func:`require_principal`'s rule.
LANE_ROUTES = (
    LaneRoute(
        "/", lambda request, _: _overview(request, check_principal(request), "overview.html")
    ),
    LaneRoute(
        "/fragments/overview",
        lambda request, _: _overview(request, check_principal(request), "_overview_live.html"),
    ),
    LaneRoute("/api/cluster", lambda request, _: _cluster_json(request, check_principal(request))),
)
