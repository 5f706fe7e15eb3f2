"""The notifier end to end on a real store, a real SMTP server (aiosmtpd) and a real webhook:
which jobs are told, what the message says, opt-out, deduplication, rate limit, failures, and
warn-then-cancel through a recording scheduler (the real ``scancel`` is in
``tests/integration/test_notify_slurm.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.notify.config import load_notify_config
from hpcscope.service.notify.delivery import Channel, EmailChannel, WebhookChannel
from hpcscope.service.notify.engine import Notifier, NotifyPolicy
from hpcscope.service.notify.scheduler import CancelFailed
from hpcscope.service.notify.wiring import notifier_from_settings
from hpcscope.store import notify as notify_store
from hpcscope.store.notify import Preferences
from tests.support.notify_data import job_rows, write_job, write_jobs, write_scenario
from tests.support.notify_servers import Mailbox, Webhook, smtp_server, text_of, webhook_server

NOW = utcnow().replace(second=30, microsecond=0)
HOUR = timedelta(hours=1)


@dataclass
class RecordingScheduler:
    """A scheduler seam that records cancels (and can refuse them)."""

    cancelled: list[str] = field(default_factory=list)
    refuse: bool = False

    def cancel(self, job_id: str, *, reason: str) -> str:
        if self.refuse:
            raise CancelFailed(f"scancel {job_id} exited 1: Invalid job id specified")
        self.cancelled.append(job_id)
        return f"scancel {job_id}: ok"


@pytest.fixture
def receivers() -> Iterator[tuple[Mailbox, Webhook]]:
    with smtp_server() as box, webhook_server() as hook:
        yield box, hook


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def notifier(
    service: Service,
    box: Mailbox,
    hook: Webhook,
    *,
    clock: Clock | None = None,
    scheduler: RecordingScheduler | None = None,
    **policy: object,
) -> Notifier:
    channels: list[Channel] = [
        EmailChannel(host=box.host, port=box.port, sender="hpcscope@example.org",
                     domain="example.org"),
        WebhookChannel(hook.url),
    ]  # fmt: skip
    return Notifier(
        service,
        load_notify_config(),
        channels=channels,
        scheduler=scheduler,
        policy=NotifyPolicy(public_url="https://hpcscope.example.org", **policy),  # type: ignore[arg-type]
        now=clock or Clock(NOW),
    )


def told(box: Mailbox) -> set[tuple[str, str, str]]:
    """(recipient, rule, job) of every mail received."""
    return {
        (to[0], str(mail["X-Hpcscope-Rule"]), str(mail["X-Hpcscope-Job"])) for to, mail in box.mails
    }


def test_each_rule_reaches_the_owner_by_mail_and_webhook_once(
    service: Service, receivers: tuple[Mailbox, Webhook]
) -> None:
    box, hook = receivers
    write_scenario(service.store, now=NOW)
    cycle = notifier(service, box, hook).run_once()
    expected = {
        ("alice@example.org", "idle-allocation", "5001"),
        ("alice@example.org", "low-efficiency", "5001"),
        ("bob@example.org", "low-efficiency", "5002"),
        ("dave@example.org", "over-requested-gpus", "5003"),
        ("bob@example.org", "xid-failure", "5005"),
    }
    assert told(box) == expected
    assert cycle.findings == 5 and cycle.sent == 10 and cycle.failed == 0
    assert {(p["notification"]["rule_id"], p["notification"]["job_id"]) for p in hook.posts} == {
        (rule, job) for _, rule, job in expected
    }
    mail = next(m for to, m in box.mails if m["X-Hpcscope-Job"] == "5002")
    body = text_of(mail)
    assert mail["Subject"] == "[hpcscope] Low real GPU efficiency: job 5002"
    assert "stayed under 20 % for the last 60 min" in body
    assert "Threshold: real efficiency under 25 %" in body  # the job's note, with its advice
    assert "What to do: Profile a few steps" in body
    assert "https://hpcscope.example.org/jobs/5002" in body
    assert "https://hpcscope.example.org/notify" in body
    post = next(p for p in hook.posts if p["notification"]["job_id"] == "5003")
    assert post["text"].startswith("[hpcscope] Some allocated GPUs are idle: job 5003")
    assert post["notification"]["figures"] == {"gpus_idle": 1.0, "gpus_allocated": 2.0}
    # the next cycle finds the same and tells nobody again (deduplication)
    again = notifier(service, box, hook).run_once()
    assert again.findings == 5 and again.sent == 0 and len(box.mails) == 5
    audit = notify_store.audit_log(service.store)
    assert len(audit) == 10 and {e.outcome for e in audit} == {"sent"}
    # past the repeat interval the running jobs are told again, the failed job never again
    later = notifier(
        service, box, hook, clock=Clock(NOW + timedelta(minutes=1)), repeat_hours=0.01
    ).run_once()
    assert later.sent == 8
    assert {(to, rule) for to, rule, _ in told(box)} == {(to, rule) for to, rule, _ in expected}
    assert [m["X-Hpcscope-Rule"] for _, m in box.mails].count("xid-failure") == 1
    assert len(box.mails) == 9
    assert {e.channel for e in audit} == {"email", "webhook"}


def test_opt_out_is_per_user_rule_and_channel(
    service: Service, receivers: tuple[Mailbox, Webhook]
) -> None:
    box, hook = receivers
    write_scenario(service.store, now=NOW)
    muted = Preferences(user="bob", webhook_enabled=False, muted_rules=("low-efficiency",))
    notify_store.set_preferences(service.store, muted, by="bob", at=NOW).result()
    cycle = notifier(service, box, hook).run_once()
    bob_mail = {(r, j) for to, r, j in told(box) if to == "bob@example.org"}
    assert bob_mail == {("xid-failure", "5005")}
    assert not any(p["notification"]["user"] == "bob" for p in hook.posts)
    withheld = [e for e in notify_store.audit_log(service.store) if e.outcome == "opted_out"]
    assert {(e.rule_id, e.channel) for e in withheld} == {
        ("low-efficiency", "email"),
        ("low-efficiency", "webhook"),
        ("xid-failure", "webhook"),
    }
    assert cycle.withheld == 3
    # alice and dave are unaffected by bob's choices
    assert ("alice@example.org", "low-efficiency", "5001") in told(box)


def test_rate_limit_per_user_and_channel(
    service: Service, receivers: tuple[Mailbox, Webhook]
) -> None:
    box, hook = receivers
    write_scenario(service.store, now=NOW)
    notifier(service, box, hook, max_per_user_per_hour=1).run_once()
    alice = [e for e in notify_store.audit_log(service.store) if e.user == "alice"]
    assert sorted(e.outcome for e in alice if e.channel == "email") == ["rate_limited", "sent"]
    assert len([to for to, _ in box.mails if to == ["alice@example.org"]]) == 1


def test_a_failed_delivery_is_audited_and_retried(
    service: Service, receivers: tuple[Mailbox, Webhook]
) -> None:
    box, hook = receivers
    write_job(service.store, "6001", user="dave", account="speech", state="RUNNING",
              gpus=[(0.1, 0.9)], now=NOW)  # fmt: skip
    hook.status = 500
    first = notifier(service, box, hook).run_once()
    assert first.sent == 1 and first.failed == 1
    failed = [e for e in notify_store.audit_log(service.store) if e.outcome == "failed"]
    assert [(e.channel, e.detail) for e in failed] == [("webhook", f"webhook {hook.url}: HTTP 500")]
    hook.status = 200
    second = notifier(service, box, hook).run_once()
    assert second.sent == 1 and len(hook.posts) == 2  # the webhook again; the mail not


def test_warn_then_cancel_waits_the_grace_and_rechecks(
    service: Service, receivers: tuple[Mailbox, Webhook]
) -> None:
    box, hook = receivers
    spec: dict[str, Any] = {"user": "alice", "account": "vision", "state": "RUNNING",
                            "started": NOW - HOUR}  # fmt: skip
    write_jobs(
        service.store,
        [
            job_rows("7001", gpus=[(0.0, 0.0)], now=NOW, first_gpu=1, **spec),
            job_rows("7002", gpus=[(0.0, 0.0)], now=NOW, first_gpu=2, **spec),
        ],
    )
    # alice muted everything: the warning still reaches her
    notify_store.set_preferences(
        service.store,
        Preferences(user="alice", email_enabled=False, webhook_enabled=False),
        by="alice",
        at=NOW,
    ).result()
    clock = Clock(NOW)
    scheduler = RecordingScheduler()
    run = notifier(service, box, hook, clock=clock, scheduler=scheduler,
                   cancel_enabled=True, cancel_grace_seconds=600)  # fmt: skip
    assert run.run_once().warned == 2
    warning = next(m for _, m in box.mails if m["X-Hpcscope-Job"] == "7001")
    assert warning["Subject"].startswith("[hpcscope] Job 7001 will be cancelled at ")
    assert "will be cancelled in 10 min" in text_of(warning)
    # 5 minutes later: still idle, the grace is not over
    clock.now = NOW + timedelta(minutes=5)
    write_jobs(
        service.store,
        [
            job_rows("7001", gpus=[(0.0, 0.0)], now=clock.now, minutes=5, first_gpu=1, **spec),
            job_rows("7002", gpus=[(0.9, 0.99)], now=clock.now, minutes=5, first_gpu=2, **spec),
        ],
    )  # 7002 works now
    step = run.run_once()
    assert (step.warned, step.cancelled, step.cleared) == (0, 0, 1)
    # 10 minutes after the warning: 7001 still idle -> cancelled
    clock.now = NOW + timedelta(minutes=10)
    write_job(service.store, "7001", gpus=[(0.0, 0.0)], now=clock.now, minutes=5, first_gpu=1,
              **spec)  # fmt: skip
    assert run.run_once().cancelled == 1
    assert scheduler.cancelled == ["7001"]
    actions = [
        (e.job_id, e.outcome)
        for e in reversed(notify_store.audit_log(service.store, kind="action"))
    ]
    assert actions == [("7001", "warned"), ("7002", "warned"), ("7002", "cleared"),
                       ("7001", "cancelled")]  # fmt: skip
    cancelled_mail = [m for _, m in box.mails if "was cancelled" in str(m["Subject"])]
    assert [m["X-Hpcscope-Job"] for m in cancelled_mail] == ["7001"]
    # a cancelled job is never cancelled twice
    clock.now += timedelta(minutes=1)
    assert run.run_once().cancelled == 0 and scheduler.cancelled == ["7001"]


def test_a_refused_cancel_is_audited(service: Service, receivers: tuple[Mailbox, Webhook]) -> None:
    box, hook = receivers
    write_job(service.store, "7101", user="dave", account="speech", state="RUNNING",
              gpus=[(0.0, 0.0)], now=NOW)  # fmt: skip
    clock = Clock(NOW)
    run = notifier(service, box, hook, clock=clock, scheduler=RecordingScheduler(refuse=True),
                   cancel_enabled=True, cancel_grace_seconds=1)  # fmt: skip
    run.run_once()
    clock.now = NOW + timedelta(seconds=2)
    run.run_once()
    outcomes = [e.outcome for e in notify_store.audit_log(service.store, kind="action")]
    assert outcomes == ["cancel_failed", "warned"]


def test_settings_build_the_channels(service: Service) -> None:
    assert notifier_from_settings(service) is None  # nothing configured: no hook
    service.settings = service.settings.model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "notify_email_domain": "example.org",
            "notify_webhook_url": "http://127.0.0.1:9/hook",
        }
    )
    built = notifier_from_settings(service)
    assert built is not None
    assert [c.name for c in built.channels] == ["email", "webhook"]
    assert built.scheduler is None and built.forwarder is None
