"""The overview's running jobs: read once for every visibility, each scope's the ones it admits.

Every tab of the overview polls it every 5 s; the running jobs' reports are read once per
generation for all (``service/diagram/live.py`` ``running_jobs``) and each scope keeps the jobs
it admits. What a principal sees must be exactly what its own scoped read returns: the same jobs,
reports and order, never a job outside its scope (a job the scheduler does not know included).
"""

from __future__ import annotations

from datetime import datetime

import pytest

from hpcscope.model.access import Principal, Role, system_principal
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import running_jobs
from hpcscope.service.identity.users import DEMO_LOGINS
from hpcscope.service.jobs.reports import JobReport
from tests.support.fleet import write_fleet, write_unknown_job

#: A reader of every job.
EVERY_JOB = system_principal("test")


def _own_read(service: Service, principal: Principal, now: datetime) -> list[JobReport]:
    """What the overview read for ``principal`` before the shared list: its own scoped read."""
    live = service.live_job_gpus(principal, window=service.live_window(), now=now)
    return [r for r in live.jobs if r.state in ("RUNNING", None) and r.gpus_observed]


@pytest.mark.parametrize("name", [login.name for login in DEMO_LOGINS])
def test_each_scope_sees_what_its_own_read_returns(service: Service, name: str) -> None:
    write_fleet(service.store, now=utcnow())
    write_unknown_job(service.store, now=utcnow())
    now = utcnow()
    everyone = running_jobs(service, EVERY_JOB, now=now)
    assert {r.job_id for r in everyone} >= {"4410001", "4410002", "4410003", "9990001"}
    principal = service.principal(name)
    assert principal is not None
    scope = principal.job_scope()
    mine = running_jobs(service, principal, now=now)
    assert mine == [r for r in everyone if scope.admits(user=r.user, account=r.account)]
    assert mine == _own_read(service, principal, now)
    if principal.role is Role.RESEARCHER:
        assert {r.user for r in mine} <= {name}
    if not scope.all_jobs:
        assert "9990001" not in {r.job_id for r in mine}


def test_the_shared_list_is_read_once_per_generation(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    now = utcnow()
    first = running_jobs(service, EVERY_JOB, now=now)
    alice = service.principal("alice")
    assert alice is not None and running_jobs(service, alice, now=now)  # another reader
    assert running_jobs(service, EVERY_JOB, now=now) == first
    assert service.snapshots.costs.snapshot()["serve.running_jobs"].computations == 1
