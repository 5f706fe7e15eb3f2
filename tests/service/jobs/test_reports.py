"""Job reports by id: visibility, however old the job, and jobs Slurm does not know."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.jobs import reports


def test_a_job_older_than_the_listing_window_is_still_reachable_by_id(service: Service) -> None:
    now = utcnow()
    rows = [
        {
            "job_id": str(1000 + i),
            "user": "alice",
            "account": "vision",
            "state": "COMPLETED",
            "start_time": now - timedelta(hours=i + 1),
            "end_time": now - timedelta(hours=i),
            "gpus": 1,
            "source": "test",
        }
        for i in range(reports.MAX_JOBS + 5)
    ]
    service.store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()
    alice, bob = service.principal("alice"), service.principal("bob")
    assert alice is not None and bob is not None
    oldest = str(1000 + reports.MAX_JOBS + 4)
    assert oldest not in {r.job_id for r in service.job_reports(alice)}  # the list is capped
    report = service.job_report(alice, oldest)
    assert report is not None and report.user == "alice"
    assert service.can_see_job(alice, oldest)
    assert service.job_report(bob, oldest) is None
    assert not service.can_see_job(bob, oldest)


def test_a_job_only_seen_on_gpus_is_for_admins(service: Service) -> None:
    sample: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
    sample.update(
        {
            "ts": utcnow() - timedelta(days=3),
            "node": "gpu01",
            "gpu": 0,
            "job_id": "777",
            "reported_util_ratio": 0.5,
            "sm_active_ratio": 0.4,
        }
    )
    service.store.append(
        "gpu_samples", pa.Table.from_pylist([sample], schema=GPU_SAMPLE_SCHEMA)
    ).result()
    admin, alice = service.principal("admin"), service.principal("alice")
    assert admin is not None and alice is not None
    assert service.can_see_job(admin, "777")
    report = service.job_report(admin, "777")
    assert report is not None and report.gpus_observed == 1 and report.user is None
    assert not service.can_see_job(alice, "777")
    assert service.job_timeseries(alice, "777") is None
    assert not service.can_see_job(admin, "778")
