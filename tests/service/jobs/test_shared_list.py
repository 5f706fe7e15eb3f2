"""The scopes' job lists take their running jobs' reports from the list of every job.

Every open job list polls its scope's list; the reports of jobs without a kept summary (the
running ones: their raw samples are most of a list's cost) are read once per generation, in the
list of every job, and each scope's list takes those of its jobs from there
(``Service.job_reports``, ``reports_for(shared=...)``). What a principal sees must be exactly
what its own read returns: the same jobs, reports and order, never a job outside its scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import pyarrow as pa
import pytest

from hpcscope.model.access import Role, system_principal
from hpcscope.model.backends import GpuMetrics, JobGpuRead
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.identity.users import DEMO_LOGINS
from tests.support.fleet import UNKNOWN_JOB, write_fleet, write_unknown_job

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


def test_a_shared_report_read_before_the_scheduler_knew_its_job_is_read_again(
    service: Service,
) -> None:
    # the demo's first seconds: a job's GPUs are scraped before sacct reports it, so the list
    # of every job (a generation older) has it with no user and no account; once Slurm names
    # carol's team, carol's list shows the job's owner as read now, never the stale "None"
    now = utcnow()
    write_fleet(service.store, now=now)
    write_unknown_job(service.store, now=now)
    every = service.reports_read(EVERY_JOB, now=now)
    stale = next(r for r in every if r.job_id == UNKNOWN_JOB)
    assert (stale.user, stale.account) == (None, None)
    record: dict[str, object] = {field.name: None for field in JOB_SCHEMA}
    record |= {
        "job_id": UNKNOWN_JOB,
        "cluster": "demo",
        "name": "late-record",
        "user": "alice",
        "account": "vision",
        "state": "RUNNING",
        "submit_time": now - timedelta(minutes=2),
        "start_time": now - timedelta(minutes=1),
        "gpus": 1,
        "nodes": "gpu01",
        "source": "test",
    }
    service.store.upsert_jobs(pa.Table.from_pylist([record], schema=JOB_SCHEMA))
    service.store.flush()
    carol = service.principal("carol")
    assert carol is not None
    given = service.reports_read(carol, now=now, shared=every)
    assert given == service.reports_read(carol, now=now)
    late = next(r for r in given if r.job_id == UNKNOWN_JOB)
    assert (late.user, late.account, late.name) == ("alice", "vision", "late-record")
    assert {r.account for r in given} <= {"vision", "nlp"}
