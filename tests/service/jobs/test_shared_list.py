"""The scopes' job lists take their running jobs' reports from the list of every job.

Every open job list polls its scope's list; the reports of jobs without a kept summary (the
running ones: their raw samples are most of a list's cost) are read once per generation, in the
list of every job, and each scope's list takes those of its jobs from there
(``Service.job_reports``, ``reports_for(shared=...)``). What a principal sees must be exactly
what its own read returns: the same jobs, reports and order, never a job outside its scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from hpcscope.model.access import Role, system_principal
from hpcscope.model.backends import GpuMetrics, JobGpuRead
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.identity.users import DEMO_LOGINS
from tests.support.fleet import write_fleet, write_unknown_job

EVERY_JOB = system_principal("test")


@pytest.mark.parametrize("name", [login.name for login in DEMO_LOGINS])
def test_a_scope_given_every_jobs_list_lists_what_its_own_read_returns(
    service: Service, name: str
) -> None:
    write_fleet(service.store, now=utcnow())
    write_unknown_job(service.store, now=utcnow())
    now = utcnow()
    every = service.reports_read(EVERY_JOB, now=now)
    assert {r.job_id for r in every} >= {"4410001", "4410002", "4410003", "9990001"}
    principal = service.principal(name)
    assert principal is not None
    own = service.reports_read(principal, now=now)
    given = service.reports_read(principal, now=now, shared=every)
    assert given == own
    scope = principal.job_scope()
    assert all(scope.admits(user=r.user, account=r.account) for r in given) or scope.all_jobs
    if not scope.all_jobs:
        assert "9990001" not in {r.job_id for r in given}
    if principal.role is Role.RESEARCHER and given:
        # its running jobs are the very reports of the list of every job, not read again
        running = {r.job_id: r for r in every if r.state == "RUNNING"}
        mine = [r for r in given if r.job_id in running]
        assert mine and all(r is running[r.job_id] for r in mine)


class _CountedReads:
    """The store's GPU reads, counting the job ids each report read asks raw samples of."""

    def __init__(self, inner: GpuMetrics) -> None:
        self.inner = inner
        self.raw_reads: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def job_gpus(self, job_ids: Sequence[str], **kwargs: Any) -> JobGpuRead:
        if job_ids:
            self.raw_reads.append(sorted(job_ids))
        return self.inner.job_gpus(job_ids, **kwargs)


def test_the_kept_lists_read_running_jobs_once_per_generation(service: Service) -> None:
    write_fleet(service.store, now=utcnow())
    reads = _CountedReads(service.gpu_samples())
    service._metrics = cast(GpuMetrics, reads)
    for name in ("alice", "bob", "carol", "dave"):
        principal = service.principal(name)
        assert principal is not None
        assert service.job_reports(principal)
    # one read of the running jobs' samples, in the list of every job (each scope read its own
    # before: four reads, the same jobs again)
    assert len(reads.raw_reads) == 1
    assert set(reads.raw_reads[0]) >= {"4410001", "4410002", "4410003"}
    assert service.snapshots.costs.snapshot()["jobs.reports"].computations == 5
