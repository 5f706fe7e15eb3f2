"""The SLO page (``/slo``) and its JSON twin (``/api/slo``): SLIs, error budgets, burn rates.

Both depend on :func:`~hpcscope.serve.auth.require_principal` and compute every figure over
the principal's scope in the service (``service/slo/report.py``): a researcher's own jobs, a
team lead's accounts, an admin's cluster (``docs/slo.md``, "Who sees what").

Both are kept answers (``serve/kept.py``): the report of a scope is computed at most once per
:data:`~hpcscope.serve.kept.REPORT_EVERY_SECONDS` (its windows are hours and days; the admin's
report over a month of 20,000 jobs takes ~56 ms, ``bench/bench_slo.py``) and data generation,
serialised once, and the page rendered once per principal and report; requests are answered on
the event loop, and past the framework by the read lane. A scope's report that is read is
recomputed before it is due, on a thread of its own after the collector's cycles
(``AheadKeeper``, ``serve/kept.py``): under load, the refresh threads' queue held it back past
its stale window, and requests computed it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.kept import (
    REPORT_EVERY_SECONDS,
    Document,
    cached_json,
    kept_page,
    page_key,
    serialise,
)
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
from hpcscope.serve.templating import render
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.contracts import SloReport
from hpcscope.service.slo.report import report_for_scope, scope_name

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _report(request: Request, principal: Principal) -> tuple[SloReport, Document]:
    """The report over the principal's scope and its serialised document (kept)."""
    service = service_of(request)
    job_scope, name = principal.job_scope(), scope_name(principal)

    def compute() -> tuple[SloReport, Document]:
        config = SloConfig.from_settings(service.settings)
        report = report_for_scope(service.store, config, job_scope, scope=name, now=utcnow())
        return report, serialise(report)

    kept: tuple[SloReport, Document] = service.snapshots.get(
        ("serve.slo", job_scope, name),
        compute,
        every_seconds=REPORT_EVERY_SECONDS,
        size=lambda value: len(value[1][0]),
        ahead=True,  # recomputed after the collector's cycles before it is due
    )
    return kept


def _slo_json(request: Request, principal: Principal) -> Response:
    return cached_json(request, *_report(request, principal)[1])


def _slo_page(request: Request, principal: Principal) -> Response:
    def page() -> Response:
        report, _ = _report(request, principal)
        return render(request, "slo.html", {"report": report}, principal=principal)

    return kept_page(
        request, ("serve.slo_page", page_key(principal)), page, every_seconds=REPORT_EVERY_SECONDS
    )


@router.get("/api/slo", response_model=SloReport)
async def slo_json(request: Request, principal: PrincipalDep) -> Response:
    """The SLOs over the jobs you may see: SLI, budget, burn rates, history, queue waits."""
    return await answer(_slo_json, request, principal)


@router.get("/slo")
async def slo_page(request: Request, principal: PrincipalDep) -> Response:
    return await answer(_slo_page, request, principal)


#: What the read lane answers past the framework (``serve/read_lane.py``).
LANE_ROUTES = (
    LaneRoute("/api/slo", lambda request, _: _slo_json(request, check_principal(request))),
    LaneRoute("/slo", lambda request, _: _slo_page(request, check_principal(request))),
)
