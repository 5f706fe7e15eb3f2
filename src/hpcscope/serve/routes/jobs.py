"""Job pages and their JSON twins: the list, one job, its per-GPU time series.

The list's document is serialised once per job scope and data generation (the service's
snapshots, ``service/snapshots.py``) and answered with an ``ETag`` (304 on a match); a job's
page and document are joined from parts kept per job (the report's, the phases) and per
visibility (the alerts, the page's header), after the principal's access check
(``serve/job_parts.py``). The list's page is kept per reader; a job's time
series, phases and alerts per job (alerts per alert scope too), after the access check, and a
finished job's at most every minute. These routes are async: a snapshot hit is answered on the
event loop, a miss computes in a worker thread (``serve/offload.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.job_parts import joined_html, joined_json, reader_document, reader_page
from hpcscope.serve.kept import Document, cached_json, etag_of, kept_page, page_key, serialise
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render
from hpcscope.service.alerts.contracts import AlertDocument, JobAlerts
from hpcscope.service.core import SeenJob, Service
from hpcscope.service.jobs import documents
from hpcscope.service.jobs.contracts import JobList, JobTimeseries
from hpcscope.service.traces.capture_contracts import JobPhases, JobReportWithPhases
from hpcscope.service.traces.job_phases import phases_of

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


@router.get("/jobs")
async def jobs_page(request: Request, principal: PrincipalDep) -> Response:
    return await answer(_jobs_page, request, principal)


def _jobs_page(request: Request, principal: Principal) -> Response:
    service = service_of(request)

    def page() -> Response:
        reports = service.job_reports(principal)
        context = {"reports": reports, "topology": service.topology}
        return render(request, "jobs.html", context, principal=principal)

    # rendered once per reader and generation, like the list's document
    return kept_page(request, ("serve.jobs_page", page_key(principal)), page)


@router.get("/api/jobs", response_model=JobList)
async def jobs_json(request: Request, principal: PrincipalDep) -> Response:
    """Every job you may see: reported vs real, GPU-hours, cost, verdict (newest first)."""
    return await answer(_jobs_json, request, principal)


def _jobs_json(request: Request, principal: Principal) -> Response:
    service = service_of(request)

    def serialised() -> tuple[bytes, str]:
        body = JobList.from_reports(service.job_reports(principal)).model_dump_json().encode()
        return body, etag_of(body)

    body, etag = service.snapshots.get(("serve.jobs_json", principal.job_scope()), serialised)
    return cached_json(request, body, etag)


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    return await answer(_job_page, request, job_id, principal)


def _job_page(request: Request, job_id: str, principal: Principal) -> Response:
    service = service_of(request)
    # one visibility check; the page's reads take the job it found
    job = service.visible_job(principal, job_id)
    report = service.report_of(job) if job is not None else None
    if job is None or report is None:
        return render(
            request,
            "not_found.html",
            {"what": f"job {job_id}"},
            principal=principal,
            status_code=404,
        )
    # joined from parts kept per job and per visibility (serve/job_parts.py)
    return joined_html(request, reader_page(request, service, job, report))


@router.get("/api/jobs/{job_id}", response_model=JobReportWithPhases)
async def job_json(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    """One job's report, with its alerts and captured phases; 404 when it does not exist or
    you may not see it."""
    return await answer(_job_json, request, job_id, principal)


def _job_json(request: Request, job_id: str, principal: Principal) -> Response:
    service = service_of(request)
    job = service.visible_job(principal, job_id)
    report = service.report_of(job) if job is not None else None
    if job is None or report is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    return joined_json(request, reader_document(service, job, report))


#: What the read lane answers past the framework (``serve/read_lane.py``): these routes' own
#: functions, after :func:`require_principal`'s rule.
LANE_ROUTES = (
    LaneRoute("/api/jobs", lambda request, _: _jobs_json(request, check_principal(request))),
    LaneRoute(
        "/jobs/{job_id}",
        lambda request, job_id: _job_page(request, job_id, check_principal(request)),
    ),
    LaneRoute(
        "/api/jobs/{job_id}",
        lambda request, job_id: _job_json(request, job_id, check_principal(request)),
    ),
    LaneRoute(
        "/api/jobs/{job_id}/timeseries",
        lambda request, job_id: _job_timeseries_json(request, job_id, check_principal(request)),
    ),
)


@router.get("/api/jobs/{job_id}/phases", response_model=JobPhases)
async def job_phases_json(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    """The job's captured phases per rank and step, its straggler (rank, node, GPU, phase,
    delay), the What-if gain and the evidence; 404 when you may not see the job."""
    return await answer(_job_phases_json, request, job_id, principal)


def _job_phases_json(request: Request, job_id: str, principal: Principal) -> Response:
    service = service_of(request)
    job = _seen(service, principal, job_id)

    def serialised() -> Document:
        return serialise(phases_of(service, job))

    key = ("serve.job_phases", job_id)  # the same for everyone who may see the job
    return _kept_json(request, key, serialised, job.every_seconds)


@router.get("/api/jobs/{job_id}/alerts", response_model=JobAlerts)
async def job_alerts_json(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    """The job page's alerts section as JSON: most severe first."""
    return await answer(_job_alerts_json, request, job_id, principal)


def _job_alerts_json(request: Request, job_id: str, principal: Principal) -> Response:
    service = service_of(request)
    job = _seen(service, principal, job_id)

    def serialised() -> Document:
        alerts = [AlertDocument.of(alert) for alert in service.alerts_of(job)]
        return serialise(JobAlerts(job_id=job_id, alerts=alerts))

    # what alerts_of reads of the principal; its version the changes of this job's alerts
    scope = (principal.alert_scope(), principal.redacts_weight_paths)
    key = ("serve.job_alerts", scope, job_id)
    version = service.job_alert_changes(job_id)
    return _kept_json(request, key, serialised, job.every_seconds, version=version)


@router.get("/api/jobs/{job_id}/timeseries", response_model=JobTimeseries)
async def job_timeseries_json(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    """Per-GPU reported vs real efficiency over time, downsampled on the server."""
    return await answer(_job_timeseries_json, request, job_id, principal)


def _job_timeseries_json(request: Request, job_id: str, principal: Principal) -> Response:
    service = service_of(request)
    job = _seen(service, principal, job_id)
    remembered = documents.remembered_timeseries(service.store, job_id)  # no query
    if remembered is not None:  # a finished job's this process stored: the same for everyone
        return cached_json(request, *remembered)

    def serialised() -> Document:
        # a finished job's: one keyed read, or computed and stored once
        found = service.stored_timeseries(job) or service.computed_timeseries(job)
        return found if found is not None else serialise(service.timeseries_of(job))

    # the same for everyone who may see the job; a finished job's at most every minute
    key = ("serve.job_timeseries", job_id)
    return _kept_json(request, key, serialised, job.every_seconds)


def _seen(service: Service, principal: Principal, job_id: str) -> SeenJob:
    job = service.visible_job(principal, job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    return job


def _kept_json(
    request: Request,
    key: Hashable,
    serialised: Callable[[], Document],
    every: float,
    *,
    version: Hashable = None,
) -> Response:
    """A job's document from the snapshots, serialised once per key and generation (and
    ``version``: the alert changes it shows)."""
    snapshots = service_of(request).snapshots
    body, etag = snapshots.get(
        key, serialised, every_seconds=every, size=lambda v: len(v[0]), version=version
    )
    return cached_json(request, body, etag)
