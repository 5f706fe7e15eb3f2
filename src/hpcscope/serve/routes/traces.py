"""Trace analyses: upload per-rank profiler traces (or, for admins, point at a directory on the
server), see the result, link it to a job. Every page has a JSON twin under ``/api/traces``.

Uploads stream to a temporary directory (:mod:`hpcscope.serve.uploads`, size-limited), the
analysis runs in the thread pool (never on the event loop), and the directory is removed
afterwards. Only what the principal may see is listed or shown (the store filters in SQL).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.errors import SourceError
from hpcscope.model.trace_analysis import StoredAnalysis
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.body import body_fields
from hpcscope.serve.kept import Document, cached_json, kept_page, page_key, serialise
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render
from hpcscope.serve.uploads import UploadError, UploadLimits, receive_files
from hpcscope.service.traces import reports as trace_reports
from hpcscope.service.traces.contracts import (
    StoredTraceReport,
    TraceList,
    TraceReport,
    TraceSummary,
)
from hpcscope.service.traces.pipeline import PHASES
from hpcscope.service.traces.reports import TraceAccessError

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _max_bytes(request: Request) -> int:
    """``upload_max_bytes``, unless ``app.state.trace_upload_max_bytes`` overrides it."""
    default = service_of(request).settings.upload_max_bytes
    return int(getattr(request.app.state, "trace_upload_max_bytes", default))


def _limits(request: Request) -> UploadLimits:
    settings = service_of(request).settings
    return UploadLimits(
        max_bytes=_max_bytes(request),
        max_members=settings.upload_max_members,
        max_expansion_ratio=settings.upload_max_expansion_ratio,
    )


def _threshold(fields: dict[str, str]) -> float:
    raw = fields.get("threshold", "").strip()
    if not raw:
        return 0.75
    try:
        value = float(raw)
    except ValueError:
        raise UploadError(f"threshold must be a number between 0 and 1, not {raw!r}") from None
    if not 0 < value <= 1:
        raise UploadError(f"threshold must be between 0 and 1, not {value}")
    return value


def _listed(request: Request, principal: Principal) -> tuple[list[StoredAnalysis], Document]:
    """The analyses the principal may see and the ``/api/traces`` document, kept per job
    scope, data generation and trace write (``serve/kept.py``: an upload or a link shows on the
    next read)."""
    service = service_of(request)

    def compute() -> tuple[list[StoredAnalysis], Document]:
        rows = trace_reports.list_analyses(service, principal)
        return rows, serialise(TraceList(analyses=[TraceSummary.from_row(r) for r in rows]))

    kept: tuple[list[StoredAnalysis], Document] = service.snapshots.get(
        ("serve.traces", principal.job_scope()),
        compute,
        size=lambda value: len(value[1][0]),
        version=service.changes("traces"),
    )
    return kept


def _list_page(
    request: Request, principal: Principal, *, error: str | None = None, status: int = 200
) -> Response:
    service = service_of(request)

    def page() -> Response:
        rows, _ = _listed(request, principal)
        jobs = [r.job_id for r in service.job_reports(principal)][:200]
        return render(
            request,
            "traces.html",
            {
                "analyses": rows,
                "jobs": jobs,
                "error": error,
                "max_upload_bytes": _max_bytes(request),
            },
            principal=principal,
            status_code=status,
        )

    if error is not None:  # after a failed upload: its message, once
        return page()
    return kept_page(
        request,
        ("serve.traces_page", page_key(principal)),
        page,
        version=service.changes("traces"),
    )


def _traces_json(request: Request, principal: Principal) -> Response:
    return cached_json(request, *_listed(request, principal)[1])


@router.get("/traces")
async def traces_page(request: Request, principal: PrincipalDep) -> Response:
    return await answer(_list_page, request, principal)


@router.get("/api/traces", response_model=TraceList)
async def traces_json(request: Request, principal: PrincipalDep) -> Response:
    """The trace analyses you may see, newest first (without their documents)."""
    return await answer(_traces_json, request, principal)


async def _upload(request: Request, principal: Principal) -> StoredAnalysis:
    service = service_of(request)
    directory = Path(tempfile.mkdtemp(prefix="hpcscope-traces-"))
    try:
        files, fields = await receive_files(request, directory, limits=_limits(request))
        if not files:
            raise UploadError("choose at least one trace file (.json, .json.gz, .tar.gz)")
        job_id = fields.get("job_id", "").strip() or None
        threshold = _threshold(fields)
        return await run_in_threadpool(
            trace_reports.analyze_and_store,
            service,
            principal,
            [path for _, path in files],
            source_names=[name for name, _ in files],
            job_id=job_id,
            threshold=threshold,
            upload_dir=directory,
        )
    finally:
        await run_in_threadpool(shutil.rmtree, directory, True)


_TMP = re.compile(re.escape(tempfile.gettempdir().rstrip("/")) + r"/hpcscope-traces-[^/\s:]+/?")


def _strip_tmp(message: str) -> str:
    """Error messages name the uploaded file, not the server's temporary directory."""
    return _TMP.sub("", message)


@router.post("/traces")
async def upload_page(request: Request, principal: PrincipalDep) -> Response:
    """Upload form target: analyse, then show the result (or the form with the error)."""
    try:
        row = await _upload(request, principal)
    except UploadError as exc:
        return _list_page(request, principal, error=exc.message, status=exc.status)
    except SourceError as exc:
        return _list_page(request, principal, error=_strip_tmp(exc.describe()), status=422)
    except TraceAccessError as exc:
        return _list_page(request, principal, error=str(exc), status=403)
    return RedirectResponse(f"/traces/{row.analysis_id}", status_code=303)


@router.post("/api/traces", status_code=201, response_model=TraceSummary)
async def upload_json(request: Request, principal: PrincipalDep) -> Response:
    """Upload traces (multipart ``files``; optional ``job_id``, ``threshold``); 201 with the
    analysis, 413 over the size limit, 422 for unreadable traces, 403 for a job you may not
    see."""
    try:
        row = await _upload(request, principal)
    except UploadError as exc:
        return JSONResponse({"error": exc.message}, status_code=exc.status)
    except SourceError as exc:
        return JSONResponse({"error": _strip_tmp(exc.describe())}, status_code=422)
    except TraceAccessError as exc:
        return JSONResponse({"error": str(exc)}, status_code=403)
    return JSONResponse(TraceSummary.from_row(row).model_dump(mode="json"), status_code=201)


async def _directory(request: Request, principal: Principal, fields: dict[str, str]) -> Any:
    path = fields.get("path", "").strip()
    job_id = fields.get("job_id", "").strip() or None
    return await run_in_threadpool(
        trace_reports.analyze_server_directory,
        service_of(request),
        principal,
        path,
        job_id=job_id,
        threshold=_threshold(fields),
    )


async def _form_fields(request: Request) -> dict[str, str]:
    return {k: str(v) for k, v in (await body_fields(request)).items()}


@router.post("/traces/directory")
async def directory_page(request: Request, principal: PrincipalDep) -> Response:
    """Admins: analyse a directory of traces on the server."""
    try:
        row = await _directory(request, principal, await _form_fields(request))
    except UploadError as exc:
        return _list_page(request, principal, error=exc.message, status=exc.status)
    except TraceAccessError as exc:
        return _list_page(request, principal, error=str(exc), status=403)
    except SourceError as exc:
        return _list_page(request, principal, error=exc.describe(), status=422)
    return RedirectResponse(f"/traces/{row.analysis_id}", status_code=303)


@router.post("/api/traces/directory", status_code=201, response_model=TraceSummary)
async def directory_json(request: Request, principal: PrincipalDep) -> Response:
    """Admins: analyse a server directory (JSON or form body: ``path``, optional ``job_id``,
    ``threshold``)."""
    try:
        row = await _directory(request, principal, await _form_fields(request))
    except UploadError as exc:
        return JSONResponse({"error": exc.message}, status_code=exc.status)
    except TraceAccessError as exc:
        return JSONResponse({"error": str(exc)}, status_code=403)
    except SourceError as exc:
        return JSONResponse({"error": exc.describe()}, status_code=422)
    return JSONResponse(TraceSummary.from_row(row).model_dump(mode="json"), status_code=201)


@router.get("/traces/{analysis_id}")
def trace_page(request: Request, analysis_id: str, principal: PrincipalDep) -> Response:
    service = service_of(request)
    found = trace_reports.get_analysis(service, principal, analysis_id)
    if found is None:
        return render(
            request,
            "not_found.html",
            {"what": f"trace analysis {analysis_id}"},
            principal=principal,
            status_code=404,
        )
    row, document = found
    can_link = row.owner_user == principal.name or principal.is_admin
    return render(
        request,
        "trace.html",
        {
            "row": row,
            "doc": document,
            "phases": PHASES,
            "can_link": can_link,
            "jobs": [r.job_id for r in service.job_reports(principal)][:200] if can_link else [],
            "error": request.query_params.get("error"),
        },
        principal=principal,
    )


@router.get("/api/traces/{analysis_id}", response_model_exclude_unset=True)
def trace_json(
    request: Request, analysis_id: str, principal: PrincipalDep
) -> TraceReport | StoredTraceReport:
    """One analysis: its summary, the ``hpcscope.traces.analysis/1`` document (with hardware
    evidence from the linked job's telemetry) and the per-step chart series."""
    report = trace_reports.get_report(service_of(request), principal, analysis_id)
    if report is None:
        raise HTTPException(status_code=404, detail=f"no trace analysis {analysis_id} visible")
    return report


@router.post("/traces/{analysis_id}/link")
async def link_page(request: Request, analysis_id: str, principal: PrincipalDep) -> Response:
    fields = await _form_fields(request)
    job_id = fields.get("job_id", "").strip() or None
    try:
        await run_in_threadpool(
            trace_reports.link_analysis, service_of(request), principal, analysis_id, job_id
        )
    except TraceAccessError as exc:
        return RedirectResponse(f"/traces/{analysis_id}?error={quote(str(exc))}", status_code=303)
    return RedirectResponse(f"/traces/{analysis_id}", status_code=303)


@router.post("/api/traces/{analysis_id}/link", response_model=TraceSummary)
async def link_json(request: Request, analysis_id: str, principal: PrincipalDep) -> Response:
    """Link to a job you may see (``job_id``; empty or null unlinks). 403 otherwise."""
    fields = await _form_fields(request)
    job_id = (fields.get("job_id") or "").strip()
    job = None if job_id in ("", "None", "null") else job_id
    try:
        row = await run_in_threadpool(
            trace_reports.link_analysis, service_of(request), principal, analysis_id, job
        )
    except TraceAccessError as exc:
        return JSONResponse({"error": str(exc)}, status_code=403)
    return JSONResponse(TraceSummary.from_row(row).model_dump(mode="json"))


#: What the read lane answers past the framework (``serve/read_lane.py``).
LANE_ROUTES = (
    LaneRoute("/api/traces", lambda request, _: _traces_json(request, check_principal(request))),
    LaneRoute("/traces", lambda request, _: _list_page(request, check_principal(request))),
)
