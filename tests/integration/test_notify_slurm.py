"""Acceptance (issue 14 part 4): a notification reaches a real SMTP server and a real webhook,
and warn-then-cancel cancels a real Slurm job after the warning period; the audit log (and
the admins' API) shows both the warning and the cancel.

The job is real (slurmctld, slurmd, ``sbatch``, ``scancel``); its GPUs are the test cluster's
fake devices, so its telemetry is written to the store as collection would have written it:
idle samples over the last 40 minutes, with the job's record (start time set to match) on the
node Slurm ran it on. The notifier uses the shipped rules (``deploy/notify``) and
:class:`~hpcscope.service.notify.scheduler.SlurmCommands`, which runs the real ``scancel``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.notify.config import load_notify_config
from hpcscope.service.notify.delivery import EmailChannel, WebhookChannel
from hpcscope.service.notify.engine import Notifier, NotifyPolicy
from hpcscope.service.notify.scheduler import SlurmCommands
from hpcscope.store import notify as notify_store
from tests.conftest import basic_auth
from tests.support.notify_data import write_job
from tests.support.notify_servers import smtp_server, text_of, webhook_server
from tests.support.slurm import slurm_cluster
from tests.support.slurm_client import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

GRACE_SECONDS = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("notify-slurm"), accounting=False) as running:
        yield running


def test_warn_then_cancel_on_real_slurm(
    cluster: SlurmCluster, service: Service, tmp_path: Path
) -> None:
    job_id = cluster.sbatch(user="hpcs_alice", account="team-a", gpus=2, script="sleep 600")
    cluster.wait_for_state(job_id, "RUNNING")
    now = utcnow()
    write_job(service.store, job_id, user="hpcs_alice", account="team-a", state="RUNNING",
              gpus=[(0.0, 0.0), (0.0, 0.0)], now=now, minutes=40, node=cluster.node)  # fmt: skip
    with smtp_server() as box, webhook_server() as hook:
        notifier = Notifier(
            service,
            load_notify_config(),
            channels=[
                EmailChannel(
                    host=box.host,
                    port=box.port,
                    sender="hpcscope@example.org",
                    domain="example.org",
                ),
                WebhookChannel(hook.url),
            ],
            scheduler=SlurmCommands(env=cluster.env),
            policy=NotifyPolicy(cancel_enabled=True, cancel_grace_seconds=GRACE_SECONDS),
        )
        first = notifier.run_once()
        assert first.warned == 1 and first.cancelled == 0
        assert cluster.job_field(job_id, "JobState") == "RUNNING"  # warned, not cancelled
        [(to, warning)] = box.mails
        assert to == ["hpcs_alice@example.org"]
        assert warning["Subject"].startswith(f"[hpcscope] Job {job_id} will be cancelled at ")
        assert f"The 2 GPU(s) of job {job_id} did nothing for the last 30 min" in text_of(warning)
        assert [p["notification"]["job_id"] for p in hook.posts] == [job_id]
        assert "cancel_at" in hook.posts[0]["notification"]

        time.sleep(GRACE_SECONDS + 0.5)
        second = notifier.run_once()
        assert second.cancelled == 1
        assert cluster.wait_for_state(job_id, "CANCELLED", timeout=30) == "CANCELLED"
        assert len(box.mails) == 2 and "was cancelled" in str(box.mails[1][1]["Subject"])
        assert len(hook.posts) == 2

    actions = [
        (e.outcome, e.channel, e.job_id)
        for e in reversed(notify_store.audit_log(service.store, kind="action"))
    ]
    assert actions == [("warned", "scancel", job_id), ("cancelled", "scancel", job_id)]
    cancelled = notify_store.audit_log(service.store, kind="action")[0]
    assert cancelled.detail.startswith(f"scancel {job_id} (idle for the 0 min after")
    # the admins' audit API shows the warning, the cancel and the deliveries
    with TestClient(create_app(service)) as client:
        entries = client.get("/api/notify/audit", headers=basic_auth("admin")).json()["entries"]
        denied = client.get("/api/notify/audit", headers=basic_auth("alice"))
    seen = {(e["kind"], e["channel"], e["outcome"]) for e in entries if e["job_id"] == job_id}
    assert seen == {
        ("action", "scancel", "warned"),
        ("action", "scancel", "cancelled"),
        ("notification", "email", "sent"),
        ("notification", "webhook", "sent"),
    }
    assert denied.status_code == 403
    # a job already cancelled is left alone (no second scancel)
    assert notifier.run_once().cancelled == 0
