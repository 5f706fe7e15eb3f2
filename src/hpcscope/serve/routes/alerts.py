"""Alerts as JSON: the alerts you may see, and acknowledging or resolving one.

Visibility is the job rule (your jobs; team leads their accounts'; admins all), applied in
SQL by the service; an alert you may not see answers 404 exactly like one that does not exist.
The job page shows a job's alerts (``/jobs/{id}``, ``/api/jobs/{id}/alerts``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from hpcscope.model.access import Principal
from hpcscope.model.alerts import AlertState, Severity
from hpcscope.serve.auth import require_principal, service_of

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


@router.get("/api/alerts")
def alerts_json(
    request: Request,
    principal: PrincipalDep,
    state: str | None = None,
    min_severity: str | None = None,
) -> dict[str, Any]:
    """Alerts you may see, most severe first (``state``: open, acknowledged, resolved;
    ``min_severity``: LOW..CRITICAL)."""
    try:
        states = None if state is None else [AlertState(state)]
        severity = None if min_severity is None else Severity.parse(min_severity)
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    found = service_of(request).alerts(principal, states=states, min_severity=severity)
    return {"alerts": [alert.to_dict() for alert in found]}


@router.post("/api/alerts/{key}/state")
async def alert_state_json(request: Request, key: str, principal: PrincipalDep) -> dict[str, Any]:
    """Acknowledge, resolve or reopen an alert of a job you may see: JSON ``{"state":
    "acknowledged" | "resolved" | "open"}``; records who and when. 404 when not visible."""
    body = (
        await request.json()
        if request.headers.get("content-type", "").startswith("application/json")
        else {}
    )
    try:
        state = AlertState(str(body.get("state") if isinstance(body, dict) else None))
    except ValueError:
        raise HTTPException(
            status_code=422, detail="state must be one of open, acknowledged, resolved"
        ) from None
    changed = await run_in_threadpool(service_of(request).set_alert_state, principal, key, state)
    if changed is None:
        raise HTTPException(status_code=404, detail=f"no alert {key} visible to you")
    return changed.to_dict()
