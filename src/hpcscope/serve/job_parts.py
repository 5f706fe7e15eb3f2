"""A job's page and document as a reader reads them: joined from parts kept per job and per
visibility, never rendered per reader.

Each part is kept on its own, keyed by what it depends on and recomputed when that changes:

* the report's parts (:func:`~hpcscope.serve.job_view.job_view`: the page above the alerts and
  below the phases; :func:`~hpcscope.serve.job_view.report_document`: the document's report),
  per job, once per generation (a finished job's at most every minute, a summarised job's
  when its report changes);
* the phases, as HTML and as JSON, per job, once per generation (a finished job's at most
  every minute);
* the alerts, as HTML and as JSON, per alert scope and role (what ``Service.alerts_of`` reads
  of the principal) and job, or once for every reader of a job with no alert; their version
  the job's alert changes, so a new alert or a state change shows at the next read;
* the page's frame around them (the header with the reader's name, the navigation), per
  reader (:func:`~hpcscope.serve.kept.page_key`), with the job's id put in its title.

A request joins the parts it reads and answers with an ETag made of theirs (304 when the
client has it: then nothing is joined). A part that is no longer current is served while it
is recomputed behind (``service/snapshots.py``), so under the collector's cycles and the
engines' alert writes a read misses only the part that changed (a job's alerts after a write
on that job), not a whole page per reader: the page used to be kept per reader and job and
computed whole (its parts read current, so recomputed too) after each generation and each
alert write of that job, in a worker thread, with 50 clients waiting behind the interpreter
lock.

The bytes are those of the page rendered whole (``job.html`` around the parts) and of the
document serialised by its models (``JobReportWithPhases`` is the report's fields, then
``alerts``, then ``phases``): ``tests/serve/test_job_parts.py`` compares both.

The caller checks visibility first (:meth:`~hpcscope.service.core.Service.visible_job`) and
passes the :class:`~hpcscope.service.core.SeenJob` it returned and the report it read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from hpcscope.model.access import Principal
from hpcscope.model.alerts import Alert
from hpcscope.serve.job_view import Part, job_view, part_size, report_document
from hpcscope.serve.kept import etag_of, page_key
from hpcscope.serve.templating import render, templates
from hpcscope.service.alerts.contracts import AlertDocument
from hpcscope.service.core import SeenJob, Service
from hpcscope.service.jobs.reports import JobReport
from hpcscope.service.traces.job_phases import phases_of

#: A reader's frame depends on the reader and the templates alone: kept this long.
FRAME_SECONDS = 3600.0
#: What the frame is rendered with in place of the job's id and of the page's main part.
_ID_MARK = "\x00hpcscope-job-id\x00"
_MAIN_MARK = "\x00hpcscope-job-main\x00"
#: Headers of a joined answer, as :func:`~hpcscope.serve.kept.cached_html` sends them.
_CACHING = {"Cache-Control": "no-cache", "Vary": "Cookie, Authorization"}


@dataclass(frozen=True, slots=True)
class Joined:
    """A reader's page or document: the parts it is made of, in order, and its ETag."""

    parts: Sequence[bytes]
    etag: str

    @property
    def body(self) -> bytes:
        """The parts joined."""
        return b"".join(self.parts)


def _etag(*tags: str) -> str:
    """A strong ETag of a body joined from parts with these ETags (and literal bytes)."""
    digest = hashlib.blake2b("\n".join(tags).encode(), digest_size=16).hexdigest()
    return f'"{digest}"'


@dataclass(frozen=True, slots=True)
class _Frame:
    """A reader's job page around the job's id (in the title) and the page's main part."""

    before_id: bytes
    before_main: bytes
    after_main: bytes
    etag: str


def _frame(request: Request, service: Service, principal: Principal) -> _Frame:
    def compute() -> _Frame:
        marked = {"job_id": _ID_MARK, "head_html": Markup(_MAIN_MARK)}
        empty = Markup("")
        context = marked | {"alerts_html": empty, "phases_html": empty, "tail_html": empty}
        body = bytes(render(request, "job.html", context, principal=principal).body)
        before_id, *rest = body.split(_ID_MARK.encode())
        middle, *after = b"".join(rest).split(_MAIN_MARK.encode())
        if len(rest) != 1 or len(after) != 1:
            raise RuntimeError("job.html: the job's id or main part not where it was")
        return _Frame(before_id, middle, after[0], etag_of(body))

    frame: _Frame = service.snapshots.get(
        ("serve.job_frame", page_key(principal)),
        compute,
        every_seconds=FRAME_SECONDS,
        size=lambda f: len(f.before_id) + len(f.before_main) + len(f.after_main),
    )
    return frame


def _alert_scope(service: Service, job: SeenJob) -> tuple[object, bool] | None:
    """What the job's alerts depend on of the principal: None when the job has none."""
    if job.job_id not in service.jobs_with_alerts():
        return None
    return (job.principal.alert_scope(), job.principal.redacts_weight_paths)


def _alerts_part(
    service: Service,
    job: SeenJob,
    scope: tuple[object, bool] | None,
    kind: str,
    encode: Callable[[list[Alert]], bytes],
) -> Part:
    """The job's alerts as ``scope`` sees them, encoded (``kind``: the page's HTML or the
    document's JSON), kept per scope and job and versioned by the job's alert changes."""

    def compute() -> Part:
        alerts = service.alerts_of(job) if scope is not None else []  # as the key says
        return Part.of(encode(alerts))

    part: Part = service.snapshots.get(
        (f"serve.job_alerts_{kind}", scope, job.job_id),
        compute,
        every_seconds=job.every_seconds,
        size=part_size,
        version=service.job_alert_changes(job.job_id),
    )
    return part


def _alerts_html(service: Service, job: SeenJob, scope: tuple[object, bool] | None) -> Part:
    def encode(alerts: list[Alert]) -> bytes:
        return _render("_job_alerts.html", job_id=job.job_id, alerts=alerts).encode()

    return _alerts_part(service, job, scope, "html", encode)


def _alerts_json(service: Service, job: SeenJob, scope: tuple[object, bool] | None) -> Part:
    def encode(alerts: list[Alert]) -> bytes:
        return b",".join(AlertDocument.of(a).model_dump_json().encode() for a in alerts)

    return _alerts_part(service, job, scope, "json", encode)


def _phases_html(service: Service, job: SeenJob) -> Part:
    def compute() -> Part:
        phases = phases_of(service, job)
        return Part.of(_render("_job_phases.html", job_id=job.job_id, phases=phases).encode())

    part: Part = service.snapshots.get(
        ("serve.job_phases_html", job.job_id),
        compute,
        every_seconds=job.every_seconds,
        size=part_size,
    )
    return part


def _phases_json(service: Service, job: SeenJob) -> Part:
    part: Part = service.snapshots.get(
        ("serve.job_phases_json", job.job_id),
        lambda: Part.of(phases_of(service, job).model_dump_json().encode()),
        every_seconds=job.every_seconds,
        size=part_size,
    )
    return part


def _render(name: str, **context: object) -> str:
    return templates.env.get_template(name).render(context)


def reader_page(request: Request, service: Service, job: SeenJob, report: JobReport) -> Joined:
    """``job``'s page as its principal reads it (module docstring)."""
    frame = _frame(request, service, job.principal)
    view = job_view(service, job, report)
    alerts = _alerts_html(service, job, _alert_scope(service, job))
    phases = _phases_html(service, job)
    job_id = str(escape(job.job_id)).encode()
    parts = (
        frame.before_id,
        job_id,
        frame.before_main,
        view.head.body,
        alerts.body,
        phases.body,
        view.tail.body,
        frame.after_main,
    )
    tags = (frame.etag, job.job_id, view.head.etag, alerts.etag, phases.etag, view.tail.etag)
    return Joined(parts, _etag(*tags))


#: The document's literal bytes around its parts.
_ALERTS_OPEN, _PHASES_OPEN, _CLOSE = b',"alerts":[', b'],"phases":', b"}"


def reader_document(service: Service, job: SeenJob, report: JobReport) -> Joined:
    """``job``'s document (``JobReportWithPhases``) as its principal reads it: the report's
    object with ``alerts`` and ``phases`` appended (module docstring)."""
    report_json = report_document(service, job, report)
    alerts = _alerts_json(service, job, _alert_scope(service, job))
    phases = _phases_json(service, job)
    parts = (report_json.body[:-1], _ALERTS_OPEN, alerts.body, _PHASES_OPEN, phases.body, _CLOSE)
    return Joined(parts, _etag("json", report_json.etag, alerts.etag, phases.etag))


def joined_html(request: Request, joined: Joined) -> Response:
    """A joined page with its ETag, or 304 when the client has it (nothing joined then)."""
    headers = {"ETag": joined.etag, **_CACHING}
    if request.headers.get("if-none-match") == joined.etag:
        return Response(status_code=304, headers=headers)
    return HTMLResponse(joined.body, headers=headers)


def joined_json(request: Request, joined: Joined) -> Response:
    """A joined document with its ETag, or 304 when the client has it."""
    headers = {"ETag": joined.etag, **_CACHING}
    if request.headers.get("if-none-match") == joined.etag:
        return Response(status_code=304, headers=headers)
    return Response(joined.body, media_type="application/json", headers=headers)
