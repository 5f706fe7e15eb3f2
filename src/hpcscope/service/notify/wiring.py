"""The notifier a site's settings describe (``hpcscope serve`` adds its hook to the collector)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.notify.alertmanager import AlertmanagerClient, AlertmanagerForwarder
from hpcscope.service.notify.config import load_notify_config
from hpcscope.service.notify.delivery import Channel, EmailChannel, WebhookChannel
from hpcscope.service.notify.engine import Notifier, NotifyPolicy
from hpcscope.service.notify.scheduler import (
    SchedulerCommands,
    SlurmCommands,
    SlurmrestdCommands,
)


def notifier_from_settings(
    service: Service,
    *,
    scheduler: SchedulerCommands | None = None,
    now: Callable[[], datetime] = utcnow,
) -> Notifier | None:
    """The notifier the site's settings describe; None when nothing would be delivered or
    done (no e-mail, no webhook, no cancel, no Alertmanager).

    Raises:
        NotifyRuleError: the rules file is bad (the server does not start).
    """
    s = service.settings
    config = load_notify_config(s.notify_rules_path)
    channels: list[Channel] = []
    if s.smtp_host and s.notify_email_domain:
        channels.append(
            EmailChannel(
                host=s.smtp_host,
                port=s.smtp_port,
                sender=s.smtp_from,
                domain=s.notify_email_domain,
                starttls=s.smtp_starttls,
            )
        )
    if s.notify_webhook_url:
        channels.append(WebhookChannel(s.notify_webhook_url))
    forwarder = (
        AlertmanagerForwarder(
            service.store,
            AlertmanagerClient(s.alertmanager_url),
            resend_seconds=s.alertmanager_resend_seconds,
            public_url=s.notify_public_url,
            now=now,
        )
        if s.alertmanager_url
        else None
    )
    if s.notify_cancel_enabled and scheduler is None:
        scheduler = (
            SlurmrestdCommands(
                s.slurm.url,
                version=s.slurm.api_version,
                user=s.slurm.user,
                token=s.slurm.token(),
            )
            if s.notify_cancel_via == "slurmrestd" and s.slurm.url
            else SlurmCommands()
        )
    if not channels and forwarder is None and not s.notify_cancel_enabled:
        return None
    return Notifier(
        service,
        config,
        channels=channels,
        scheduler=scheduler if s.notify_cancel_enabled else None,
        forwarder=forwarder,
        policy=NotifyPolicy(
            repeat_hours=s.notify_repeat_hours,
            max_per_user_per_hour=s.notify_max_per_user_per_hour,
            cancel_enabled=s.notify_cancel_enabled,
            cancel_grace_seconds=s.notify_cancel_grace_seconds,
            public_url=s.notify_public_url,
            interval_seconds=s.notify_interval_seconds,
        ),
        now=now,
    )
