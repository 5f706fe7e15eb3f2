"""The SLO page (``/slo``) and its JSON twin (``/api/slo``): SLIs, error budgets, burn rates.

Both depend on :func:`~hpcscope.serve.auth.require_principal` and compute every figure over
the principal's scope in the service (``service/slo/report.py``): a researcher's own jobs, a
team lead's accounts, an admin's cluster (``docs/slo.md``, "Who sees what").
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.contracts import SloReport
from hpcscope.service.slo.report import slo_report

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _report(request: Request, principal: Principal) -> SloReport:
    service = service_of(request)
    config = SloConfig.from_settings(service.settings)
    return slo_report(service.store, config, principal, now=utcnow())


@router.get("/api/slo")
async def slo_json(request: Request, principal: PrincipalDep) -> SloReport:
    """The SLOs over the jobs you may see: SLI, budget, burn rates, history, queue waits."""
    return await run_in_threadpool(_report, request, principal)


@router.get("/slo")
async def slo_page(request: Request, principal: PrincipalDep) -> Response:
    report = await run_in_threadpool(_report, request, principal)
    return render(request, "slo.html", {"report": report}, principal=principal)
