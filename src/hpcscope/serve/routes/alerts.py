"""The alerts page and its JSON twin; acknowledge and resolve (``docs/security.md``).

``GET /alerts`` and ``GET /api/alerts`` take the same filters (``state``, ``severity``: the
minimum, ``vector``: number or catalog name, ``job``). Reads are scoped in SQL (G3): a
researcher sees the alerts of their own jobs, a team lead those of the accounts they
coordinate, an admin all. ``POST /api/alerts/{key}/state`` (JSON ``{"state": ...}`` or the
page's form) changes the state of an alert on one's own job; admins of any (G9): 404 for an
alert you cannot see, 403 for one you see but that is not on your job.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.alerts import VECTOR_NAMES, Alert, AlertState, Severity, Vector
from hpcscope.model.kept_alerts import KeptPerAlert
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.body import body_fields
from hpcscope.serve.kept import Document, cached_json, etag_of, kept_page, page_key, query_of
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render, templates
from hpcscope.service.alerts.access import (
    AlertStateDenied,
    alerts_in_memory,
    may_change_state,
    owners_read,
)
from hpcscope.service.alerts.contracts import AlertDocument, AlertFilters, AlertList
from hpcscope.service.alerts.documents import alert_list_bytes
from hpcscope.service.core import Service

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]
StateQuery = Annotated[str | None, Query(description="open, acknowledged or resolved")]
SeverityQuery = Annotated[str | None, Query(description="minimum: LOW, MEDIUM, HIGH, CRITICAL")]
VectorQuery = Annotated[str | None, Query(description="1-6 or a name (supply-chain...)")]
JobQuery = Annotated[str | None, Query(description="one job id")]


def _vector(value: str) -> Vector:
    if value.isdigit() and 1 <= int(value) <= max(Vector):
        return Vector(int(value))
    for vector, name in VECTOR_NAMES.items():
        if value.strip().lower() in (name, vector.name.lower()):
            return vector
    names = ", ".join(VECTOR_NAMES.values())
    raise ValueError(f"unknown vector {value!r} (1-6 or one of {names})")


def _state(value: str) -> AlertState:
    try:
        return AlertState(value.strip().lower())
    except ValueError:
        states = ", ".join(s.value for s in AlertState)
        raise ValueError(f"unknown state {value!r} (one of {states})") from None


def _read(
    request: Request,
    principal: Principal,
    state: str | None,
    severity: str | None,
    vector: str | None,
    job: str | None,
) -> tuple[list[Alert], AlertFilters, Document]:
    """The alerts, their filters and the ``/api/alerts`` document, kept per alert scope,
    redaction, filters and alert-state change (``serve/kept.py``). Raises ValueError naming a
    bad filter."""
    service = service_of(request)
    states = [_state(state)] if state else None
    minimum = Severity.parse(severity) if severity else None
    chosen = _vector(vector) if vector else None
    read = _owners_read(service)

    def compute() -> tuple[list[Alert], AlertFilters, Document]:
        found = service.alerts(
            principal,
            states=states,
            min_severity=minimum,
            vector=chosen,
            job_id=job or None,
            as_read=read is not None,
        )
        filters = AlertFilters(
            state=states[0].value if states else None,
            min_severity=minimum.name if minimum else None,
            vector=VECTOR_NAMES[chosen] if chosen else None,
            job_id=job or None,
        )
        body = alert_list_bytes(found, filters)  # serialise(AlertList.of(...)): tested
        return found, filters, (body, etag_of(body))

    # what Service.alerts reads of the principal (as Service.job_alerts keys it) and the
    # filters; its version the alert changes (states changed here, alerts written)
    key = (
        "serve.alerts",
        principal.alert_scope(),
        principal.redacts_weight_paths,
        tuple(states or ()),
        minimum,
        chosen,
        job or None,
    )
    # from the store's alert index, a new list (after each of the engines' alert writes,
    # about 8 a second at 128 nodes) costs about a millisecond: computed on the read lane
    # rather than every reader missing it at once and waiting for a worker thread
    kept: tuple[list[Alert], AlertFilters, Document] = service.snapshots.get(
        key,
        compute,
        size=lambda value: len(value[2][0]),
        version=(service.alert_changes, read),
        inline=read is not None or alerts_in_memory(service.store),
    )
    return kept


def _owners_read(service: Service) -> int | None:
    """Once a collector publishes its cycles, the version of the jobs' owners as it read them
    after its last one (``service/diagram/alert_counts.py`` ``read_owners``), when the alerts
    are in memory: the lists and pages are read with those owners, never a query, and keyed
    by it. Reading them again after every write between cycles (many a second at 128 nodes)
    made every new list a query, so every reader of the alerts page missed it (about 1,100
    times in 24 s) and waited for a worker thread. A job's first alert since is nobody's job
    (the security team and admins see it) until the cycle's end. None: read as before."""
    return owners_read(service.store, published=service.snapshots.published)


_FILTERS = ("state", "severity", "vector", "job")


def _alerts_json(
    request: Request,
    principal: Principal,
    state: str | None,
    severity: str | None,
    vector: str | None,
    job: str | None,
) -> Response:
    return cached_json(request, *_read(request, principal, state, severity, vector, job)[2])


def _lane_alerts_json(request: Request) -> Response:
    principal = check_principal(request)
    query = query_of(request, _FILTERS)
    return _alerts_json(request, principal, *(query.get(name) for name in _FILTERS))


@router.get("/api/alerts", response_model=AlertList)
async def alerts_json(
    request: Request,
    principal: PrincipalDep,
    state: StateQuery = None,
    severity: SeverityQuery = None,
    vector: VectorQuery = None,
    job: JobQuery = None,
) -> Response:
    """The alerts you may see, most severe and most recent first; 400 on a bad filter."""
    try:
        return await answer(_alerts_json, request, principal, state, severity, vector, job)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def _page(
    request: Request,
    principal: Principal,
    state: str | None,
    severity: str | None,
    vector: str | None,
    job: str | None,
) -> Response:
    """The page (kept per principal and document); raises ValueError on a bad filter."""
    _read(request, principal, state, severity, vector, job)  # a bad filter raises here

    def page() -> Response:
        found, filters, _ = _read(request, principal, state, severity, vector, job)
        return _render(request, principal, found, filters, None, 200)

    service = service_of(request)
    read = _owners_read(service)
    key = ("serve.alerts_page", page_key(principal), state, severity, vector, job)
    # rendered from rows kept per alert (about 3 ms at 128 nodes): on the read lane, as its list
    return kept_page(
        request, key, page, version=(service.alert_changes, read), inline=read is not None
    )


def _render(
    request: Request,
    principal: Principal,
    found: list[Alert],
    filters: AlertFilters,
    error: str | None,
    status: int,
) -> Response:
    back = _back(filters)
    return render(
        request,
        "alerts.html",
        {
            "alerts": found,
            "rows": [alert_row(a, may_change_state(principal, a), back) for a in found],
            "filters": filters,
            "error": error,
            "states": [s.value for s in AlertState],
            "severities": [s.name for s in Severity],
            "vectors": list(VECTOR_NAMES.values()),
            "back": back,
        },
        principal=principal,
        status_code=status,
    )


#: Rows of the alerts page kept rendered (about 1.5 KB each), least recently used out first.
ROWS = 4096
KEPT_ROWS: KeptPerAlert[Markup] = KeptPerAlert(ROWS)


def alert_row(alert: Alert, actionable: bool, back: str) -> Markup:
    """One alert's row of the alerts page (``_alert_row.html``): the page is rendered again
    for every reader after every alert write, and each alert is immutable, so its row is
    rendered once per alert, whether the reader may change its state, and the page's address
    (where its buttons return); the alert's newer version replaces the older."""

    def rendered() -> Markup:
        row = templates.env.get_template("_alert_row.html").render(
            a=alert,
            vector_names=VECTOR_NAMES,
            actionable=frozenset((alert.key,)) if actionable else frozenset(),
            back=back,
        )
        return Markup(row)  # rendered by the autoescaping environment

    return KEPT_ROWS.get((alert.key, type(alert), actionable, back), alert, rendered)


def _lane_page(request: Request) -> Response:
    principal = check_principal(request)
    query = query_of(request, _FILTERS)
    return _page(request, principal, *(query.get(name) for name in _FILTERS))


@router.get("/alerts")
async def alerts_page(
    request: Request,
    principal: PrincipalDep,
    state: StateQuery = None,
    severity: SeverityQuery = None,
    vector: VectorQuery = None,
    job: JobQuery = None,
    error: str | None = None,
) -> Response:
    try:
        if error is None:
            return await answer(_page, request, principal, state, severity, vector, job)
        found, filters, _ = await answer(_read, request, principal, state, severity, vector, job)
        return _render(request, principal, found, filters, error, 200)
    except ValueError as exc:
        empty = AlertFilters(state=None, min_severity=None, vector=None, job_id=None)
        return _render(request, principal, [], empty, str(exc), 400)


def _back(filters: AlertFilters) -> str:
    """The page's address with its filters (where a form post returns)."""
    pairs = [
        ("state", filters.state),
        ("severity", filters.min_severity),
        ("vector", filters.vector),
        ("job", filters.job_id),
    ]
    query = "&".join(f"{k}={quote(v)}" for k, v in pairs if v)
    return "/alerts" + (f"?{query}" if query else "")


async def _fields(request: Request) -> dict[str, str]:
    return {k: str(v) for k, v in (await body_fields(request)).items()}


@router.post("/api/alerts/{key}/state", response_model=AlertDocument)
async def alert_state(request: Request, key: str, principal: PrincipalDep) -> Response:
    """Acknowledge, resolve or reopen (``state``) an alert on your own job (admins: any).

    JSON in, the changed alert out; a form post (the page's buttons) is sent back to the page.
    """
    fields = await _fields(request)
    form = not request.headers.get("content-type", "").startswith("application/json")
    back = fields.get("back") or "/alerts"
    if not back.startswith("/"):
        back = "/alerts"
    try:
        state = _state(fields.get("state", ""))
        changed = await run_in_threadpool(
            service_of(request).set_alert_state, principal, key, state
        )
    except ValueError as exc:
        return _answer(form, back, str(exc), 400)
    except AlertStateDenied as exc:
        return _answer(form, back, str(exc), 403)
    if changed is None:
        return _answer(form, back, "no such alert visible to you", 404)
    if form:
        return RedirectResponse(back, status_code=303)
    return JSONResponse(AlertDocument.of(changed).model_dump(mode="json"))


def _answer(form: bool, back: str, message: str, status: int) -> Response:
    if form:
        joiner = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{joiner}error={quote(message)}", status_code=303)
    return JSONResponse({"detail": message}, status_code=status)


#: What the read lane answers past the framework (``serve/read_lane.py``), filters included
#: (parsed as the routes do; a bad one raises and the app answers it).
LANE_ROUTES = (
    LaneRoute("/api/alerts", lambda request, _: _lane_alerts_json(request), query=True),
    LaneRoute("/alerts", lambda request, _: _lane_page(request), query=True),
)
