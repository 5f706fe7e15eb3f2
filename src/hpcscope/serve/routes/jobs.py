"""Job pages and their JSON twins: the list, one job, its per-GPU time series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render
from hpcscope.service.alerts.contracts import AlertDocument, JobAlerts, JobReportWithAlerts
from hpcscope.service.jobs.contracts import JobList, JobReportDocument, JobTimeseries
from hpcscope.service.notify.access import notes_of_report
from hpcscope.service.traces.capture_contracts import JobPhases, JobReportWithPhases
from hpcscope.service.traces.job_phases import job_phases

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


@router.get("/jobs")
def jobs_page(request: Request, principal: PrincipalDep) -> Response:
    service = service_of(request)
    reports = service.job_reports(principal)
    return render(
        request,
        "jobs.html",
        {"reports": reports, "topology": service.topology},
        principal=principal,
    )


@router.get("/api/jobs")
def jobs_json(request: Request, principal: PrincipalDep) -> JobList:
    """Every job you may see: reported vs real, GPU-hours, cost, verdict (newest first)."""
    return JobList.from_reports(service_of(request).job_reports(principal))


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, principal: PrincipalDep) -> Response:
    service = service_of(request)
    report = service.job_report(principal, job_id)
    if report is None:
        return render(
            request,
            "not_found.html",
            {"what": f"job {job_id}"},
            principal=principal,
            status_code=404,
        )
    alerts = service.job_alerts(principal, job_id) or []
    notes = notes_of_report(service, report)
    phases = job_phases(service, principal, job_id)
    return render(
        request,
        "job.html",
        {
            "report": report,
            "topology": service.topology,
            "alerts": alerts,
            "notes": notes,
            "phases": phases,
        },
        principal=principal,
    )


@router.get("/api/jobs/{job_id}")
def job_json(request: Request, job_id: str, principal: PrincipalDep) -> JobReportWithPhases:
    """One job's report, with its alerts and captured phases; 404 when it does not exist or
    you may not see it."""
    service = service_of(request)
    report = service.job_report(principal, job_id)
    phases = job_phases(service, principal, job_id)
    if report is None or phases is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    alerts = service.job_alerts(principal, job_id) or []
    document = JobReportWithAlerts.of(JobReportDocument.from_report(report), alerts)
    return JobReportWithPhases.join(document, phases)


@router.get("/api/jobs/{job_id}/phases")
def job_phases_json(request: Request, job_id: str, principal: PrincipalDep) -> JobPhases:
    """The job's captured phases per rank and step, its straggler (rank, node, GPU, phase,
    delay), the What-if gain and the evidence; 404 when you may not see the job."""
    phases = job_phases(service_of(request), principal, job_id)
    if phases is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    return phases


@router.get("/api/jobs/{job_id}/alerts")
def job_alerts_json(request: Request, job_id: str, principal: PrincipalDep) -> JobAlerts:
    """The job page's alerts section as JSON: most severe first."""
    alerts = service_of(request).job_alerts(principal, job_id)
    if alerts is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    return JobAlerts(job_id=job_id, alerts=[AlertDocument.of(alert) for alert in alerts])


@router.get("/api/jobs/{job_id}/timeseries")
def job_timeseries_json(request: Request, job_id: str, principal: PrincipalDep) -> JobTimeseries:
    """Per-GPU reported vs real efficiency over time, downsampled on the server."""
    series = service_of(request).job_timeseries(principal, job_id)
    if series is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id} visible to you")
    return series
