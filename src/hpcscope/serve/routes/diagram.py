"""The explorable cluster diagram: ``/diagram`` and its JSON twin ``/api/diagram``.

Routes:

* ``GET /diagram`` — the page (``?node=`` zooms into a node, ``?element=`` opens a card,
  ``?mode=observe|threats``, ``?reader=engineer|decision``); works without JavaScript.
* ``GET /diagram/card/{id}`` — one card as an HTML fragment (what the page's script loads).
* ``GET /diagram/decision`` — the decision-maker panel as a fragment (loaded on demand: its
  cost query scans a day of samples, the first render should not wait for it).
* ``GET /api/diagram`` — everything the page shows, as JSON.
* ``GET /api/diagram/elements/{id}`` — one card as JSON.
* ``GET /api/diagram/state`` — the live classes and texts the page polls, with an ETag.

Every route resolves the viewer first: a logged-in principal, or an anonymous visitor when the
site setting ``anonymous_diagram`` is on; otherwise a login redirect (pages) or 401 (API). The
service constrains every query with the viewer's job scope.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import service_of, site_viewer
from hpcscope.serve.diagram.contracts import DiagramPage, DiagramState
from hpcscope.serve.diagram.layout import layout_diagram
from hpcscope.serve.diagram.shapes import DiagramLayout, Role
from hpcscope.serve.diagram.view import duration, jsonable, live_payload, shape_view
from hpcscope.serve.templating import percent, render, templates
from hpcscope.service.core import Service
from hpcscope.service.diagram.cards import ElementCard, UnknownElement, element_card
from hpcscope.service.diagram.cost import decision_view
from hpcscope.service.diagram.live import LiveState, Viewer, live_state

router = APIRouter()
templates.env.filters["duration"] = duration

#: Seconds between two polls of the live state by the page (paused while the tab is hidden).
POLL_SECONDS = 7


def viewer_of(request: Request) -> Viewer:
    """Dependency: the diagram's viewer, or a login redirect / 401 when one is needed."""
    return Viewer(site_viewer(request))


ViewerDep = Annotated[Viewer, Depends(viewer_of)]
NodeQuery = Annotated[str | None, Query(description="Zoom into this node.")]


#: Layouts are pure functions of (topology, catalog, zoom): computed once per process. The
#: cached value holds the topology itself, so its id cannot be reused while the entry lives.
_LAYOUTS: OrderedDict[tuple[int, int, str | None], tuple[object, DiagramLayout]] = OrderedDict()
_LAYOUT_CACHE_SIZE = 256


def _layout(service: Service, node: str | None) -> DiagramLayout:
    if node is not None:
        try:
            service.topology.node(node)
        except KeyError:
            raise HTTPException(404, f"no node {node!r} in {service.topology.name}") from None
    key = (id(service.topology), id(service.catalog), node)
    cached = _LAYOUTS.get(key)
    if cached is not None and cached[0] is service.topology:
        _LAYOUTS.move_to_end(key)
        return cached[1]
    layout = layout_diagram(service.topology, service.catalog, zoom_node=node)
    _LAYOUTS[key] = (service.topology, layout)
    while len(_LAYOUTS) > _LAYOUT_CACHE_SIZE:
        _LAYOUTS.popitem(last=False)
    return layout


#: How long one viewer's live state is reused while the store has had no write (seconds): the
#: page polls every POLL_SECONDS, so many open pages share one computation; the bound keeps
#: freshness (a GPU turning stale with time) and the collectors' in-memory health current.
STATE_REUSE_SECONDS = 1.0
#: Per store (weakly: a closed service's go with it), per (viewer, zoom node): the committed
#: writes and the monotonic instant the state was computed at, and the state.
_STATES: weakref.WeakKeyDictionary[
    Any, OrderedDict[tuple[Viewer, str | None], tuple[int, float, LiveState]]
] = weakref.WeakKeyDictionary()
_STATE_CACHE_SIZE = 256
_STATES_LOCK = threading.Lock()


def _state(service: Service, viewer: Viewer, layout: DiagramLayout) -> LiveState:
    """The live state for ``viewer``, reused while no write has committed and for at most
    :data:`STATE_REUSE_SECONDS` (it is the diagram's hot path: every open page polls it)."""
    key = (viewer, layout.zoom_node)
    writes = service.store.writes_committed
    with _STATES_LOCK:
        states = _STATES.setdefault(service.store, OrderedDict())
        cached = states.get(key)
    if (
        cached is not None
        and cached[0] == writes
        and time.monotonic() - cached[1] < (STATE_REUSE_SECONDS)
    ):
        return cached[2]
    nodes = [layout.zoom_node] if layout.zoom_node is not None else None
    started = time.monotonic()
    state = live_state(service, viewer, now=utcnow(), nodes=nodes)
    with _STATES_LOCK:
        states[key] = (writes, started, state)
        states.move_to_end(key)
        while len(states) > _STATE_CACHE_SIZE:
            states.popitem(last=False)
    return state


def summary_text(state: LiveState) -> str:
    """One line of cluster-wide aggregate health (names no job)."""
    c = state.cluster
    if not c.gpus_reporting:
        return f"No GPU of the {c.gpus_total} has reported in the last {state.fresh_seconds:.0f} s."
    text = (
        f"{c.gpus_allocated} of {c.gpus_total} GPUs allocated · allocated GPUs: real efficiency "
        f"{percent(c.sm_active_ratio)} SM active, reported utilisation "
        f"{percent(c.reported_util_ratio)}"
    )
    if c.gpus_reporting < c.gpus_total:
        text += f" · {c.gpus_total - c.gpus_reporting} GPUs without recent data"
    if c.gpus_with_xid:
        text += f" · {c.gpus_with_xid} with an Xid error"
    return text


@router.get("/diagram")
def diagram_page(
    request: Request,
    viewer: ViewerDep,
    node: NodeQuery = None,
    element: Annotated[str | None, Query(description="Open this element's card.")] = None,
    mode: Literal["observe", "threats"] = "observe",
    reader: Literal["engineer", "decision"] = "engineer",
) -> Response:
    service = service_of(request)
    layout = _layout(service, node)
    state = _state(service, viewer, layout)
    card = None
    if element is not None:
        try:
            card = element_card(service, viewer, element, now=state.generated_at)
        except UnknownElement:
            card = None
    decision = (
        decision_view(service, viewer, now=state.generated_at) if reader == "decision" else None
    )
    context: dict[str, Any] = {
        "topology": service.topology,
        "catalog": service.catalog,
        "layout": layout,
        "shapes": shape_view(layout, state),
        "state": state,
        "summary": summary_text(state),
        "viewer": viewer,
        "card": card,
        "mode": mode,
        "reader": reader,
        "decision": decision,
        "poll_seconds": POLL_SECONDS,
        "Role": Role,
    }
    return render(request, "diagram.html", context, principal=viewer.principal)


@router.get("/diagram/card/{element_id}")
def diagram_card(
    request: Request, element_id: str, viewer: ViewerDep, node: NodeQuery = None
) -> Response:
    service = service_of(request)
    try:
        card = element_card(service, viewer, element_id)
    except UnknownElement:
        return render(
            request,
            "diagram/_card_missing.html",
            {"element_id": element_id},
            principal=viewer.principal,
            status_code=404,
        )
    context = {"card": card, "viewer": viewer, "zoom_node": node, "topology": service.topology}
    return render(request, "diagram/_card.html", context, principal=viewer.principal)


@router.get("/diagram/decision")
def diagram_decision(request: Request, viewer: ViewerDep) -> Response:
    service = service_of(request)
    context = {"decision": decision_view(service, viewer), "viewer": viewer}
    return render(request, "diagram/_decision.html", context, principal=viewer.principal)


@router.get("/api/diagram/state", responses={200: {"model": DiagramState}})
def diagram_state(request: Request, viewer: ViewerDep, node: NodeQuery = None) -> Response:
    """Live classes, accessible names and GPU texts of every drawn shape (polled)."""
    service = service_of(request)
    layout = _layout(service, node)
    state = _state(service, viewer, layout)
    body, etag = live_payload(layout, state, summary_text(state))
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Cookie, Authorization"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


@router.get("/api/diagram/elements/{element_id}", responses={200: {"model": ElementCard}})
def diagram_element_json(request: Request, element_id: str, viewer: ViewerDep) -> Response:
    service = service_of(request)
    try:
        card = element_card(service, viewer, element_id)
    except UnknownElement:
        return JSONResponse({"detail": f"no element {element_id!r}"}, status_code=404)
    return JSONResponse(jsonable(card))


@router.get("/api/diagram", responses={200: {"model": DiagramPage}})
def diagram_json(request: Request, viewer: ViewerDep, node: NodeQuery = None) -> Response:
    """The page as JSON: structure, layout, cards, live values, collectors, threats, cost."""
    service = service_of(request)
    layout = _layout(service, node)
    state = _state(service, viewer, layout)
    catalog = service.catalog
    shapes = shape_view(layout, state)
    body = {
        "topology": {
            "name": service.topology.name,
            "description": service.topology.description,
            "nodes": len(service.topology.nodes),
            "gpus": service.topology.gpu_count,
        },
        "viewer": {
            "anonymous": viewer.anonymous,
            "user": viewer.name,
            "role": viewer.principal.role.value if viewer.principal else None,
        },
        "generated_at": jsonable(state.generated_at),
        "summary": summary_text(state),
        "layout": {
            "view": layout.view.value,
            "zoom_node": layout.zoom_node,
            "width": layout.width,
            "height": layout.height,
            "bands": jsonable(layout.bands),
            "shapes": [
                {**jsonable(shape), "class": shapes[shape.id]["class"]} for shape in layout.shapes
            ],
            "links": jsonable(layout.links),
        },
        "live": {
            "fresh_seconds": state.fresh_seconds,
            "gpus": jsonable(state.gpus),
            "nodes": jsonable(state.nodes),
            "cluster": jsonable(state.cluster),
        },
        "collectors": jsonable(state.collectors),
        "detections": {
            "configured": state.alerts.configured,
            "shown": state.alerts.shown,
            "open_by_vector": jsonable(state.alerts.by_vector) if state.alerts.shown else None,
            "open_by_node": jsonable(state.alerts.by_node) if state.alerts.shown else None,
            "worst_by_vector": (
                jsonable(state.alerts.worst_by_vector) if state.alerts.shown else None
            ),
            "worst_by_node": jsonable(state.alerts.worst_by_node) if state.alerts.shown else None,
        },
        "cards": {kind.value: jsonable(card) for kind, card in catalog.cards.items()},
        "threat_vectors": jsonable(catalog.threat_vectors),
        "decision": jsonable(decision_view(service, viewer, now=state.generated_at)),
        "try_this": list(catalog.try_this),
    }
    return JSONResponse(body)
