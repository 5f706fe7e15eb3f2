"""The alert documents the API and the CLI emit (``docs/schemas/alert*.schema.json``).

One :class:`AlertDocument` per stored alert (:class:`hpcscope.model.alerts.Alert`), a list of
them, and the job report with its alerts (``GET /api/jobs/{id}``, ``hpcscope job ID --json``).
"""

from __future__ import annotations

from hpcscope.model.alerts import Alert
from hpcscope.service.contract import Contract, UtcText
from hpcscope.service.jobs.contracts import JobReportDocument


class EvidenceDocument(Contract):
    """What a rule saw, and where the raw event is."""

    summary: str
    source: str
    position: str | None
    link: str | None


class AlertDocument(Contract):
    """One deduplicated alert: rule, vector, severity, attribution, evidence and state."""

    key: str
    rule_id: str
    vector: int
    vector_name: str
    severity: str
    title: str
    first_seen: UtcText
    last_seen: UtcText
    count: int
    node: str | None
    container: str | None
    pod: str | None
    job_id: str | None
    user: str | None
    account: str | None
    gpu: int | None
    subject: str | None
    step: int | None
    evidence: list[EvidenceDocument]
    state: str
    state_by: str | None
    state_at: UtcText | None

    @classmethod
    def of(cls, alert: Alert) -> AlertDocument:
        """The document of one alert."""
        return cls.model_validate(alert.to_dict())


class JobAlerts(Contract):
    """A job's alerts, most severe first (the job page's alerts section)."""

    job_id: str
    alerts: list[AlertDocument]


class JobReportWithAlerts(JobReportDocument):
    """One job's report and its alerts (``GET /api/jobs/{id}``, ``hpcscope job ID --json``)."""

    alerts: list[AlertDocument]

    @classmethod
    def of(cls, document: JobReportDocument, alerts: list[Alert]) -> JobReportWithAlerts:
        """The report document joined with the job's alerts."""
        return cls(
            **dict(document),
            alerts=[AlertDocument.of(alert) for alert in alerts],
        )


class AlertFilters(Contract):
    """The filters a list of alerts was read with (null: not filtered)."""

    state: str | None
    min_severity: str | None
    vector: str | None
    job_id: str | None


class AlertList(Contract):
    """The alerts a principal may see, most severe and most recent first (``GET /api/alerts``,
    ``hpcscope alerts --json``)."""

    filters: AlertFilters
    count: int
    alerts: list[AlertDocument]

    @classmethod
    def of(cls, alerts: list[Alert], filters: AlertFilters) -> AlertList:
        """The list document of ``alerts`` read with ``filters``."""
        return cls(filters=filters, count=len(alerts), alerts=[AlertDocument.of(a) for a in alerts])
