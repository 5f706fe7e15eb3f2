"""A job's page and document: rendered once per job and data change, plus a thin reader layer.

Everything on a job's page but its alerts and the page's header (the reader's name and role)
is the same for every principal who may see the job: its report, notes, phases, GPUs. Its
JSON document likewise, but its ``alerts``. :func:`job_view` renders and serialises those
parts once per job and generation (a finished job's at most every minute, like its report:
:func:`~hpcscope.service.core.report_every_seconds`) into one kept entry, :class:`JobView`;
a reader's page (:func:`reader_page`) and document (:func:`reader_document`) then add what is
theirs: the alerts as their alert scope and role see them (``Service.alerts_of``) and, on the
page, the header. A miss for a second reader of a job is a small render and a join of bytes,
where it used to be the whole page (notes and phases read from the store, the report's
template) once per principal.

The document is joined, not serialised again: ``JobReportWithPhases`` is the report's fields,
then ``alerts``, then ``phases`` (in that order, the models' own), so its JSON is the report's
object with the two members appended (``tests/serve/test_job_view.py`` compares the bytes
with the models' own serialisation).

The caller checks visibility first (:meth:`~hpcscope.service.core.Service.visible_job`): every
function here takes the :class:`~hpcscope.service.core.SeenJob` that check returned, and the
report it read for that job.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup
from starlette.requests import Request

from hpcscope.model.alerts import Alert
from hpcscope.serve.kept import Document, etag_of, page_key
from hpcscope.serve.templating import render, templates
from hpcscope.service.alerts.contracts import AlertDocument
from hpcscope.service.core import SeenJob, Service, report_every_seconds
from hpcscope.service.jobs.contracts import JobReportDocument
from hpcscope.service.jobs.reports import JobReport
from hpcscope.service.notify.access import notes_of_report
from hpcscope.service.traces.job_phases import phases_of


@dataclass(frozen=True, slots=True)
class JobView:
    """What of a job's page and document every reader who may see the job shares.

    Attributes:
        report_json: the job's ``JobReportDocument``, serialised.
        phases_json: its ``JobPhases``, serialised.
        head_html: the page's main part above the alerts section.
        tail_html: the page's main part below it.
    """

    report_json: bytes
    phases_json: bytes
    head_html: str
    tail_html: str

    @property
    def size(self) -> int:
        """Bytes kept (the snapshots' budget)."""
        return (
            len(self.report_json)
            + len(self.phases_json)
            + len(self.head_html)
            + len(self.tail_html)
        )


def job_view(service: Service, job: SeenJob, report: JobReport) -> JobView:
    """The shared parts of ``job``'s page and document (module docstring), kept per job."""

    def compute() -> JobView:
        notes = notes_of_report(service, report)  # the report is visible: its notes are too
        phases = phases_of(service, job)
        context = {"report": report, "notes": notes, "phases": phases}
        return JobView(
            report_json=JobReportDocument.from_report(report).model_dump_json().encode(),
            phases_json=phases.model_dump_json().encode(),
            head_html=templates.env.get_template("_job_head.html").render(context),
            tail_html=templates.env.get_template("_job_tail.html").render(context),
        )

    return service.snapshots.get(
        ("serve.job_view", job.job_id),
        compute,
        every_seconds=report_every_seconds(report),
        size=lambda view: view.size,
    )


def _alerts_html(job_id: str, alerts: list[Alert]) -> str:
    return templates.env.get_template("_job_alerts.html").render(job_id=job_id, alerts=alerts)


def reader_page(request: Request, service: Service, job: SeenJob, report: JobReport) -> bytes:
    """``job``'s page as its principal reads it: the shared parts (:func:`job_view`) inside
    the page's header, with the job's alerts as the principal sees them; kept per reader (what
    a page may use of a principal, :func:`~hpcscope.serve.kept.page_key`: a page read by HTTP
    Basic and one read with the session cookie are the same page), job and alert changes."""
    principal, job_id = job.principal, job.job_id

    def page() -> bytes:
        view = job_view(service, job, report)
        context = {
            "job_id": job_id,
            "head_html": Markup(view.head_html),  # rendered, escaped, by the same templates
            "alerts_html": Markup(_alerts_html(job_id, service.alerts_of(job))),
            "tail_html": Markup(view.tail_html),
        }
        return bytes(render(request, "job.html", context, principal=principal).body)

    key = ("serve.job_page", page_key(principal), job_id, service.job_alert_changes(job_id))
    return service.snapshots.get(key, page, every_seconds=report_every_seconds(report), size=len)


def reader_document(service: Service, job: SeenJob, report: JobReport) -> Document:
    """``job``'s document (``JobReportWithPhases``) as its principal reads it, and its ETag:
    the shared parts joined with the alerts as the principal sees them; kept per alert scope
    and role (what ``Service.alerts_of`` reads of the principal), job and alert changes."""
    principal, job_id = job.principal, job.job_id

    def serialised() -> Document:
        view = job_view(service, job, report)
        alerts = b",".join(
            AlertDocument.of(alert).model_dump_json().encode() for alert in service.alerts_of(job)
        )
        body = b"".join(
            (view.report_json[:-1], b',"alerts":[', alerts, b'],"phases":', view.phases_json, b"}")
        )
        return body, etag_of(body)

    scope = (principal.alert_scope(), principal.redacts_weight_paths)
    key = ("serve.job_json", scope, job_id, service.job_alert_changes(job_id))
    return service.snapshots.get(
        key,
        serialised,
        every_seconds=report_every_seconds(report),
        size=lambda document: len(document[0]),
    )
