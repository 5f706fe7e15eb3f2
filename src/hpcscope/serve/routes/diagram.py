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

The page and the live poll are async: a snapshot hit is answered on the event loop, a miss (or
a page with an open card, which is not cached) computes in a worker thread
(``serve/offload.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import check_site_viewer, service_of, site_viewer
from hpcscope.serve.diagram.contracts import DiagramPage, DiagramState
from hpcscope.serve.diagram.layout import layout_diagram
from hpcscope.serve.diagram.shapes import DiagramLayout, Role
from hpcscope.serve.diagram.view import duration, jsonable, live_payload, shape_view
from hpcscope.serve.kept import Document, cached_html, etag_of
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import percent, render, templates
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import alert_summary
from hpcscope.service.diagram.cards import ElementCard, UnknownElement, element_card
from hpcscope.service.diagram.cost import decision_view
from hpcscope.service.diagram.live import LiveState, Viewer, kept_live_state, live_state
from hpcscope.service.snapshots import SnapshotMiss, caching_only

router = APIRouter()
templates.env.filters["duration"] = duration

#: Seconds between two polls of the live state by the page (paused while the tab is hidden).
POLL_SECONDS = 7


async def viewer_of(request: Request) -> Viewer:
    """Dependency: the diagram's viewer, or a login redirect / 401 when one is needed."""
    return Viewer(await site_viewer(request))


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
    if caching_only():  # a layout takes a while at 1,024 GPUs: not on the event loop
        raise SnapshotMiss(key)
    layout = layout_diagram(service.topology, service.catalog, zoom_node=node)
    _LAYOUTS[key] = (service.topology, layout)
    while len(_LAYOUTS) > _LAYOUT_CACHE_SIZE:
        _LAYOUTS.popitem(last=False)
    return layout


@dataclass(frozen=True, slots=True)
class LiveView:
    """One generation's live state for a class of viewers, and its poll body and ETag."""

    state: LiveState
    body: bytes
    etag: str


def _live(service: Service, viewer: Viewer, layout: DiagramLayout) -> LiveView:
    """The live state for ``viewer``, computed once per data generation and change of the
    open-alert counts for every viewer who sees the same (:meth:`Viewer.visibility`) and zoom
    (the service's snapshots, ``service/snapshots.py``): every open page polls it, and the
    serialised body and ETag come with it."""

    def compute() -> LiveView:
        if layout.zoom_node is None:  # the whole cluster: shared with the overview
            state = kept_live_state(service, viewer)
        else:
            nodes = [layout.zoom_node]
            state = live_state(service, viewer, now=utcnow(), nodes=nodes, shared=service.snapshots)
        body, etag = live_payload(layout, state, summary_text(state))
        return LiveView(state, body, etag)

    # the open-alert counts it draws, read once per alert write (service/diagram/alert_counts.py):
    # a new alert or state shows at the next poll, and an open alert's repeated events (several
    # a second under attack) leave the view of every GPU as it is. The counts are its version,
    # not part of its key: in the key, every count the alerts went through left a view (and
    # the live state it holds, ~1 MB at 128 nodes) behind until the entry budget pushed it out
    alerts = alert_summary(service, viewer, shared=service.snapshots)
    key = ("serve.diagram_live", viewer.visibility(), layout.zoom_node)
    return service.snapshots.get(
        key, compute, size=lambda view: len(view.body), version=alerts.fingerprint()
    )


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


Mode = Literal["observe", "threats"]
Reader = Literal["engineer", "decision"]


@router.get("/diagram")
async def diagram_page(
    request: Request,
    viewer: ViewerDep,
    node: NodeQuery = None,
    element: Annotated[str | None, Query(description="Open this element's card.")] = None,
    mode: Mode = "observe",
    reader: Reader = "engineer",
) -> Response:
    if element is not None:  # a card reads the store, and the page is not cached
        return await run_in_threadpool(_diagram_page, request, viewer, node, element, mode, reader)
    return await answer(_diagram_page, request, viewer, node, element, mode, reader)


def _diagram_page(
    request: Request,
    viewer: Viewer,
    node: str | None,
    element: str | None,
    mode: Mode,
    reader: Reader,
) -> Response:
    service = service_of(request)
    layout = _layout(service, node)

    def page() -> Document:
        """The page for this viewer (their name is on it) and these parameters, and its ETag:
        290 KiB at 1,024 GPUs, rendered once per data generation unless a card is open."""
        state = _live(service, viewer, layout).state
        card = None
        if element is not None:
            try:
                card = element_card(service, viewer, element, now=state.generated_at)
            except UnknownElement:
                card = None
        decision = (
            decision_view(service, viewer, now=state.generated_at) if reader == "decision" else None
        )
        context: dict[str, object] = {
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
        body = bytes(render(request, "diagram.html", context, principal=viewer.principal).body)
        return body, etag_of(body)

    if element is not None:  # any string: one page each would let a client fill the memory
        return HTMLResponse(page()[0])
    changes = service.alert_changes if mode == "threats" else None  # its counts: every write
    key = ("serve.diagram_page", viewer, layout.zoom_node, mode, reader)
    return cached_html(request, *service.snapshots.get(key, page, version=changes))


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
async def diagram_state(request: Request, viewer: ViewerDep, node: NodeQuery = None) -> Response:
    """Live classes, accessible names and GPU texts of every drawn shape (polled)."""
    return await answer(_diagram_state, request, viewer, node)


def _diagram_state(request: Request, viewer: Viewer, node: str | None) -> Response:
    service = service_of(request)
    layout = _layout(service, node)
    live = _live(service, viewer, layout)
    body, etag = live.body, live.etag
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Cookie, Authorization"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _lane_viewer(request: Request) -> Viewer:
    """:func:`viewer_of`'s rule, for the read lane."""
    return Viewer(check_site_viewer(request))


#: What the read lane answers past the framework (``serve/read_lane.py``): the page without a
#: zoom or an open card in its default mode and reader, and the live poll, with these routes'
#: own functions after :func:`viewer_of`'s rule.
LANE_ROUTES = (
    LaneRoute(
        "/diagram",
        lambda request, _: _diagram_page(
            request, _lane_viewer(request), None, None, "observe", "engineer"
        ),
    ),
    LaneRoute(
        "/api/diagram/state",
        lambda request, _: _diagram_state(request, _lane_viewer(request), None),
    ),
)


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
    state = _live(service, viewer, layout).state
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
