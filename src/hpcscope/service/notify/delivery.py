"""Delivery channels: e-mail over SMTP and a JSON webhook. One seam, :class:`Channel`.

A channel delivers one :class:`Message` or raises :class:`DeliveryError` with why; the
notifier audits either outcome. Neither retries: the next cycle finds the rule still holding
and, the earlier attempt having ``failed``, tries again (deduplication counts only ``sent``).
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Protocol

import httpx2

from hpcscope.ingest.tls import default_tls_context
from hpcscope.model.errors import HpcscopeError


class DeliveryError(HpcscopeError):
    """A notification could not be delivered (server unreachable, refused, HTTP error)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One notification to one person.

    Attributes:
        rule_id: the rule (or ``cancel-warning``, ``cancelled``) behind it.
        job_id / user / account: the job and its owner.
        subject: one line.
        body: plain text: what was measured, the threshold, what to do, what happens next.
        fields: the same facts, machine-readable (the webhook's ``notification``).
    """

    rule_id: str
    job_id: str | None
    user: str | None
    account: str | None
    subject: str
    body: str
    fields: Mapping[str, object] = field(default_factory=dict)


class Channel(Protocol):
    """Where notifications go: ``email`` or ``webhook``."""

    name: str

    def recipient(self, message: Message) -> str | None:
        """Who the message goes to on this channel; None: nobody (it is not sent)."""
        ...

    def deliver(self, message: Message) -> None:
        """Send one message.

        Raises:
            DeliveryError: it was not delivered.
        """
        ...


class EmailChannel:
    """E-mail to ``<user>@<domain>`` through one SMTP server (``smtplib``)."""

    name = "email"

    def __init__(
        self,
        *,
        host: str,
        port: int,
        sender: str,
        domain: str,
        starttls: bool = False,
        timeout_seconds: float = 10.0,
    ) -> None:
        self.host, self.port, self.sender, self.domain = host, port, sender, domain
        self.starttls = starttls
        self.timeout_seconds = timeout_seconds

    def recipient(self, message: Message) -> str | None:
        if not message.user or "@" in message.user or not message.user.isprintable():
            return None
        return f"{message.user}@{self.domain}"

    def deliver(self, message: Message) -> None:
        to = self.recipient(message)
        if to is None:
            raise DeliveryError(f"no e-mail address for user {message.user!r}")
        email = EmailMessage()
        email["From"] = self.sender
        email["To"] = to
        email["Subject"] = message.subject
        email["Date"] = formatdate(usegmt=True)
        email["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or None)
        email["X-Hpcscope-Rule"] = message.rule_id
        if message.job_id:
            email["X-Hpcscope-Job"] = message.job_id
        email.set_content(message.body)
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_seconds) as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                smtp.send_message(email)
        except (OSError, smtplib.SMTPException) as exc:
            raise DeliveryError(f"SMTP {self.host}:{self.port}: {exc}") from None


class WebhookChannel:
    """A JSON ``POST`` per notification: ``text`` (Slack/Mattermost incoming webhooks show it)
    and ``notification`` (rule, job, user, account, subject, body and the fields)."""

    name = "webhook"

    def __init__(self, url: str, *, timeout_seconds: float = 10.0) -> None:
        self.url = url
        self.timeout_seconds = timeout_seconds

    def recipient(self, message: Message) -> str | None:
        return self.url

    def payload(self, message: Message) -> dict[str, object]:
        return {
            "text": f"{message.subject}\n{message.body}",
            "notification": {
                "rule_id": message.rule_id,
                "job_id": message.job_id,
                "user": message.user,
                "account": message.account,
                "subject": message.subject,
                "body": message.body,
                **dict(message.fields),
            },
        }

    def deliver(self, message: Message) -> None:
        try:
            response = httpx2.post(
                self.url,
                json=self.payload(message),
                timeout=self.timeout_seconds,
                verify=default_tls_context(),
            )
        except httpx2.HTTPError as exc:
            raise DeliveryError(f"webhook {self.url}: {exc}") from None
        if response.status_code >= 300:
            raise DeliveryError(f"webhook {self.url}: HTTP {response.status_code}")
