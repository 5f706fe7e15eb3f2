"""Notifications: job notes, your own preferences (opt-out) and, for admins, the audit log.

* ``GET /api/jobs/{id}/notes``: what is wrong with a job, the threshold and what to do, with
  the per-GPU figures (the job's visibility rule: 404 when not visible);
* ``GET /api/notify/preferences`` and ``PUT`` (JSON): **your own** channels and muted rules;
  no route reads or changes another person's;
* ``GET /api/notify/audit``: every notification and action (admins; 403 otherwise);
* ``GET /notify``: the page (your preferences form; the audit log for admins);
  ``POST /notify/preferences``: the page's form.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render
from hpcscope.service.notify import access
from hpcscope.service.notify.contracts import (
    AuditLog,
    JobNotesDocument,
    PreferencesDocument,
    PreferencesUpdate,
)

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


@router.get("/api/jobs/{job_id}/notes")
def job_notes_json(request: Request, job_id: str, principal: PrincipalDep) -> JobNotesDocument:
    """A job's notes, most serious first; 404 when the job is absent or not yours to see."""
    found = access.notes_for_job(service_of(request), principal, job_id)
    if found is None:
        raise HTTPException(status_code=404, detail="no such job visible to you")
    return found


@router.get("/api/notify/preferences")
def preferences_json(request: Request, principal: PrincipalDep) -> PreferencesDocument:
    """Your own notification preferences."""
    return access.my_preferences(service_of(request), principal)


@router.put("/api/notify/preferences")
def preferences_put(
    request: Request, update: PreferencesUpdate, principal: PrincipalDep
) -> PreferencesDocument:
    """Change your own preferences (fields left out keep their value); 400 on an unknown rule."""
    try:
        return access.update_my_preferences(service_of(request), principal, update)
    except access.PreferencesError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


@router.get("/api/notify/audit")
def audit_json(
    request: Request,
    principal: PrincipalDep,
    job: Annotated[str | None, Query(description="one job id")] = None,
    kind: Annotated[str | None, Query(description="notification or action")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> AuditLog:
    """Audited notifications and actions, newest first (admins only)."""
    try:
        return access.audit_for(service_of(request), principal, job_id=job, kind=kind, limit=limit)
    except access.AuditDenied as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None


@router.get("/notify")
def notify_page(request: Request, principal: PrincipalDep, error: str | None = None) -> Response:
    service = service_of(request)
    prefs = access.my_preferences(service, principal)
    audit = access.audit_for(service, principal, limit=200) if principal.is_admin else None
    return render(
        request,
        "notify.html",
        {"prefs": prefs, "audit": audit, "error": error},
        principal=principal,
    )


@router.post("/notify/preferences")
async def preferences_form(request: Request, principal: PrincipalDep) -> Response:
    """The page's form: checkboxes for the channels, one per rule to mute."""
    form = await request.form()
    update = PreferencesUpdate(
        email_enabled=form.get("email_enabled") == "on",
        webhook_enabled=form.get("webhook_enabled") == "on",
        muted_rules=[str(v) for v in form.getlist("muted")],
    )
    try:
        await run_in_threadpool(
            access.update_my_preferences, service_of(request), principal, update
        )
    except access.PreferencesError as exc:
        return RedirectResponse(f"/notify?error={quote(str(exc))}", status_code=303)
    return RedirectResponse("/notify", status_code=303)
