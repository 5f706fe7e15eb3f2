"""Documents that the web app itself builds: ``/api/cluster``, ``/api/whoami``, ``/healthz``.

Those of a capability live with it (``service/<capability>/contracts.py``,
``serve/diagram/contracts.py``); see :mod:`hpcscope.service.contract` for the conventions.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hpcscope.service.contract import Contract, Number, UtcText
from hpcscope.service.diagram.live import GpuNow
from hpcscope.service.jobs.contracts import CollectionGap, TargetHealth
from hpcscope.service.jobs.reports import HEALTH_GAPS
from hpcscope.service.notify.contracts import JobNotesDocument
from hpcscope.service.traces.capture_contracts import JobReportWithPhases


class ClusterState(BaseModel):
    """Every GPU's latest state as the caller may see it, and the collector's health."""

    # GpuNow is the service's dataclass (its enum and datetime arrive as JSON values): lax.
    model_config = ConfigDict(extra="forbid", frozen=True)

    generated_at: UtcText
    fresh_seconds: Number
    gpus: list[GpuNow]
    targets: list[TargetHealth]
    gaps: list[CollectionGap] = Field(
        description=f"the latest {HEALTH_GAPS} collection gaps of the last hour, oldest first"
    )
    gaps_last_hour: int = Field(description="every collection gap of the last hour, listed or not")


class JobScopeDocument(Contract):
    """Which jobs a principal may see: all, or those of these users and accounts."""

    all_jobs: bool
    users: list[str]
    accounts: list[str]


class WhoAmI(Contract):
    """Who the server thinks the caller is, and which jobs they may see."""

    user: str
    role: str
    coordinated_accounts: list[str]
    scope: JobScopeDocument
    authenticated_by: str = Field(
        description="session, basic, proxy, or 'token <id>' (the API token's public id)"
    )
    may_change: bool = Field(
        description="false for a read-only API token and for an auditor: reads only"
    )


class Health(Contract):
    """Liveness: the process is up and the store answers (no job or user data)."""

    status: str
    version: str
    store_schema_version: int


class JobReportWithNotes(JobReportWithPhases):
    """One job's report, its alerts, its captured phases and its notes (``hpcscope job report
    ID --json``: the documents of ``GET /api/jobs/{id}`` and ``GET /api/jobs/{id}/notes``
    together). Defined here, above both capabilities: notify and traces never import each
    other."""

    notes: JobNotesDocument | None
