"""A job's page parts shared by every reader: rendered once per job and report.

What a job's page shows of its report (the figures, the notes, the GPUs) is the same for every
principal who may see the job, and so is its JSON document's report. :func:`job_view` renders
the page's parts once per job and report into one kept entry, :class:`JobView`: a summarised
job's with its report document's digest as version, kept for minutes (nothing else it shows
changes), and stored in the store once (:func:`report_parts`, ``service/jobs/views.py``; a
keeper renders every summarised job's after the collector's cycles, :class:`ViewKeeper`), so
that a first read of it in a process is one keyed row; :func:`report_document` serialises the
report once per job and report. A reader's page and document join these with the parts that
change apart or are theirs (``serve/job_parts.py``).

The caller checks visibility first (:meth:`~hpcscope.service.core.Service.visible_job`): every
function here takes the :class:`~hpcscope.service.core.SeenJob` that check returned, and the
report it read for that job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from threading import Event, Lock

from hpcscope.model.access import Principal, Role
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import Topology
from hpcscope.serve.kept import etag_of
from hpcscope.serve.templating import templates
from hpcscope.service.core import SeenJob, Service, report_every_seconds
from hpcscope.service.jobs.contracts import JobReportDocument
from hpcscope.service.jobs.reports import JobReport
from hpcscope.service.jobs.views import (
    forget_other_views,
    store_views,
    stored_view,
    summarised_without_view,
    view_kind,
)
from hpcscope.service.keeper import PassKeeper
from hpcscope.service.notify.access import notes_of_report, notes_of_reports, notify_config


@dataclass(frozen=True, slots=True)
class Part:
    """A kept part of a job's page or document: its bytes and their ETag (a reader's answer
    joins parts, ``serve/job_parts.py``; its ETag is made of theirs)."""

    body: bytes
    etag: str

    @classmethod
    def of(cls, body: bytes) -> Part:
        """``body`` with its ETag."""
        return cls(body, etag_of(body))


def part_size(part: Part) -> int:
    """Bytes a part holds (the snapshots' budget)."""
    return len(part.body)


@dataclass(frozen=True, slots=True)
class JobView:
    """What of a job's page every reader who may see the job shares, from its report alone.

    Attributes:
        head: the page's main part above the alerts section (the report, the notes).
        tail: the part below the phases (the chart, the GPUs).
    """

    head: Part
    tail: Part

    @property
    def size(self) -> int:
        """Bytes kept (the snapshots' budget)."""
        return len(self.head.body) + len(self.tail.body)


#: A summarised job's view, versioned by its report document, is kept this long whatever the
#: generation: nothing else it shows changes once the summary is written.
SUMMARISED_VIEW_SECONDS = 600.0


def job_view(service: Service, job: SeenJob, report: JobReport) -> JobView:
    """The shared parts of ``job``'s page and document (module docstring), kept per job; a
    summarised job's with its report document's digest as version (a changed report renders
    them again), else once per generation (a finished job's at most every minute)."""
    report_json = report_document(service, job, report)

    def compute() -> JobView:
        head, tail = report_parts(service, report, report_json.body)
        return JobView(head=Part.of(head.encode()), tail=Part.of(tail.encode()))

    summarised = report.source == "summary"
    return service.snapshots.get(
        ("serve.job_view", job.job_id),
        compute,
        every_seconds=SUMMARISED_VIEW_SECONDS if summarised else report_every_seconds(report),
        size=lambda view: view.size,
        version=report_json.etag if summarised else None,
    )


def report_document(service: Service, job: SeenJob, report: JobReport) -> Part:
    """``job``'s ``JobReportDocument``, serialised: kept per job as its report is (the same
    for everyone who may see it). The job's document needs only this of its report, not the
    page's parts (:func:`job_view`: its notes read from the store, its templates)."""
    return service.snapshots.get(
        ("serve.job_report_json", job.job_id),
        lambda: Part.of(JobReportDocument.from_report(report).model_dump_json().encode()),
        every_seconds=report_every_seconds(report),
        size=part_size,
    )


def report_parts(service: Service, report: JobReport, report_json: bytes) -> tuple[str, str]:
    """The page's parts rendered from the report alone (above the alerts; below the phases):
    a summarised job's stored ones when they were rendered from this very report document,
    else rendered now (and stored, for a summarised job)."""
    kind, summarised = view_kind_of(service), report.source == "summary"
    if summarised:
        found = stored_view(service.store, report.job_id, kind)
        if found is not None:
            parts = json.loads(found)
            if parts["report"] == report_json.decode():
                return str(parts["head"]), str(parts["tail"])
    notes = notes_of_report(service, report)  # the report is visible: its notes are too
    head = _render("_job_head.html", report=report, notes=notes)
    tail = _render("_job_tail.html", report=report)
    if summarised and not service.store.read_only:  # not waited for: read next time
        store_views(service.store, kind, [(report.job_id, _stored(report_json, head, tail))])
    return head, tail


def _stored(report_json: bytes, head: str, tail: str) -> bytes:
    return json.dumps({"report": report_json.decode(), "head": head, "tail": tail}).encode()


def _render(name: str, **context: object) -> str:
    return templates.env.get_template(name).render(context)


def view_kind_of(service: Service) -> str:
    """The kind a job's report parts are stored as here: the version of the templates they are
    rendered with, of the notes thresholds and of the GPUs' memory the notes read."""
    return _kind(repr(notify_config(service).notes) + _memory_of(service.topology))


#: The GPUs' memory of the last topologies seen (each held, so that its id stays its own).
_MEMORY: dict[int, tuple[Topology, str]] = {}


_MEMORY_LOCK = Lock()


def _memory_of(topology: Topology) -> str:
    with _MEMORY_LOCK:
        kept = _MEMORY.get(id(topology))
        if kept is None or kept[0] is not topology:
            memory = sorted((g.node, g.index, g.model.memory_bytes) for g in topology.gpus)
            kept = _MEMORY[id(topology)] = (topology, repr(memory))
            while len(_MEMORY) > 8:
                del _MEMORY[next(iter(_MEMORY))]
        return kept[1]


@lru_cache(maxsize=8)
def _kind(settings: str) -> str:
    loader = templates.env.loader
    assert loader is not None
    names = ("_job_head.html", "_job_tail.html", "_macros.html")
    sources = [loader.get_source(templates.env, name)[0].encode() for name in names]
    return view_kind([*sources, settings.encode()])


#: Jobs whose report parts one pass of the keeper renders and stores.
PASS_JOBS = 200
#: Jobs read and rendered together.
BATCH_JOBS = 50
#: Who the keeper reads reports as: every job (what it stores is served only after a
#: reader's own visibility check).
KEEPER = Principal(name="hpcscope", role=Role.ADMIN, read_only=True, via="keeper")


def keep_views(
    service: Service,
    *,
    most: int = PASS_JOBS,
    stopping: Event | None = None,
    skipped: set[str] | None = None,
) -> int:
    """Render and store the report parts of up to ``most`` summarised jobs that have none of
    this version (the latest ended first), :data:`BATCH_JOBS` at a time (one read of their
    reports and one of their GPUs' facts); returns how many were stored. ``skipped``: jobs not
    to try again (those without a summarised report are added to it)."""
    kind, skipped = view_kind_of(service), skipped if skipped is not None else set()
    due = summarised_without_view(service.store, kind, limit=most + len(skipped))
    due = [job_id for job_id in due if job_id not in skipped][:most]
    stored = 0
    for start in range(0, len(due), BATCH_JOBS):
        if stopping is not None and stopping.is_set():
            break
        batch = due[start : start + BATCH_JOBS]
        found = [r for r in _reports(service, batch) if r.source == "summary"]
        skipped.update(set(batch) - {r.job_id for r in found})
        views = []
        for report, notes in zip(found, notes_of_reports(service, found), strict=True):
            report_json = JobReportDocument.from_report(report).model_dump_json().encode()
            head = _render("_job_head.html", report=report, notes=notes)
            tail = _render("_job_tail.html", report=report)
            views.append((report.job_id, _stored(report_json, head, tail)))
        stored += store_views(service.store, kind, views).result()
    return stored


def _reports(service: Service, job_ids: list[str]) -> list[JobReport]:
    """The reports of ``job_ids`` (as any one of them alone: ``Service.job_report``)."""
    return service.reports_read(KEEPER, now=utcnow(), job_ids=job_ids)


class ViewKeeper(PassKeeper):
    """After a collector cycle, a pass of :func:`keep_views` on a thread of its own
    (:class:`~hpcscope.service.keeper.PassKeeper`); only where the store holds the GPU samples
    (a metrics engine's jobs are rendered when read)."""

    def __init__(
        self, service: Service, *, start: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        super().__init__(name="hpcscope-job-views", start=start)
        self.service = service
        self._skipped: set[str] = set()
        self._kind: str | None = None

    @property
    def stored(self) -> int:
        """Jobs' report parts stored so far."""
        return self.done

    def due(self) -> bool:
        return self.service.gpu_samples().backend == "embedded"

    def work(self) -> int:
        kind = view_kind_of(self.service)
        if kind != self._kind:  # once per version: the other versions' rows are dropped
            forget_other_views(self.service.store, kind).result()
            self._kind = kind
        return keep_views(self.service, stopping=self.stopping, skipped=self._skipped)
