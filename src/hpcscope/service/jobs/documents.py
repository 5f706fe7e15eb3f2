"""A finished job's time series, computed once and stored: a read of it is one keyed row.

The chart of a job (``/api/jobs/{id}/timeseries``, :mod:`hpcscope.service.jobs.timeseries`)
reads its samples, rollups and summary: 5-20 ms of CPU per job, and a month of finished jobs
read in any order made every first read a computation in the request. A finished job's chart
no longer changes once its summary is written, so :class:`DocumentKeeper` (an after-cycle
hook of the collector) computes the charts of the summarised jobs that have none, the latest
ended first, on a thread of its own (a pass at most :data:`PASS_JOBS` jobs, :data:`BATCH_JOBS`
at a time with their reads before the samples made once for the batch; resting after each
batch as long as it computed, unless a whole pass is waiting: the requests keep most of the
interpreter), and stores each as the bytes the route serves (``store/job_documents.py``). A
chart a request had to compute first is stored by that request (:func:`computed_timeseries`).
What this process stores is also held in memory, within a budget (``MEMORY_BYTES`` of
``store/job_documents.py``): the route answers those on the event loop, without a query
(:func:`remembered_timeseries`).
The retention pass drops those that read what it deletes, and the keeper computes them again
from what is left.

Only the store's own samples are kept so: a job read from a metrics engine is computed per
read (the engine's retention is its own).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime

from pydantic import BaseModel

from hpcscope.model.backends import GpuMetrics
from hpcscope.model.timeutil import utcnow
from hpcscope.service.jobs.timeseries import (
    EmbeddedTimeseries,
    embedded_timeseries,
    embedded_timeseries_of,
)
from hpcscope.service.keeper import PassKeeper
from hpcscope.store import job_documents as stored
from hpcscope.store.duck import Store
from hpcscope.store.reports import EmbeddedSamples

log = logging.getLogger(__name__)

#: The kind of document a job's time series is stored as.
TIMESERIES = "timeseries"
#: Jobs computed per pass (a pass runs on the keeper's thread, one at a time).
PASS_JOBS = 200
#: Jobs computed together (their reads before the samples made once: ``timeseries.py``).
BATCH_JOBS = 25
#: Bodies held before they are written (a 64-GPU job's is ~2 MB).
WRITE_BYTES = 16 << 20
#: The keeper rests this share of each batch's computation after it: it takes at most about
#: half of one core's time from the requests it shares the interpreter with. Not while it is
#: a whole pass behind (a fresh store, an upgrade): then each job it has not stored yet costs
#: a request its computation, and the backlog goes first.
REST_SHARE = 1.0


def document_bytes(document: BaseModel) -> tuple[bytes, str]:
    """``document`` as the web framework serialises a route's answer, and its strong ETag
    (the same bytes as ``hpcscope.serve.kept.serialise``: tested)."""
    body = json.dumps(
        document.model_dump(mode="json"),
        ensure_ascii=False,
        allow_nan=False,
        indent=None,
        separators=(",", ":"),
    ).encode("utf-8")
    return body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def store_timeseries(
    store: Store,
    *,
    scrape_interval_seconds: float,
    metrics: GpuMetrics | None = None,
    most: int = PASS_JOBS,
    now: datetime | None = None,
    pause: Callable[[float], bool] | None = None,
) -> int:
    """Compute and store the time series of up to ``most`` summarised jobs that have none;
    returns how many were stored (0 when the samples are read from a metrics engine).

    The jobs are computed :data:`BATCH_JOBS` at a time (:func:`embedded_timeseries_of`).
    ``pause``: called with each batch's seconds of computation; True stops the pass (what was
    computed is stored). Bodies are written every :data:`WRITE_BYTES` (a pass of large jobs
    holds no more)."""
    reader = metrics if metrics is not None else EmbeddedSamples(store)
    if reader.backend != "embedded":
        return 0
    written, documents, held = 0, [], 0
    waiting = stored.jobs_without(store, TIMESERIES, limit=most)
    for at in range(0, len(waiting), BATCH_JOBS):
        started = time.perf_counter()
        batch = waiting[at : at + BATCH_JOBS]
        reads = embedded_timeseries_of(store, batch, reader, scrape_interval_seconds)
        for job_id in batch:
            documents.append(stored_document(job_id, reads[job_id]))
            held += len(documents[-1].body)
            if held >= WRITE_BYTES:
                written += stored.write_documents(
                    store, TIMESERIES, documents, now=now or utcnow(), remember=True
                ).result()
                documents, held = [], 0
        if pause is not None and pause(time.perf_counter() - started):
            break
    last = stored.write_documents(store, TIMESERIES, documents, now=now or utcnow(), remember=True)
    return written + last.result()


def stored_document(job_id: str, read: EmbeddedTimeseries) -> stored.JobDocument:
    """``read`` as the row it is stored as: the route's bytes, their ETag, what it read."""
    body, etag = document_bytes(read.document)
    return stored.JobDocument(job_id, etag, body, read.raw_first, read.rollup_first)


def computed_timeseries(
    store: Store, job_id: str, reader: GpuMetrics, *, scrape_interval_seconds: float
) -> tuple[bytes, str]:
    """A job's time series computed now, as bytes and ETag; a summarised job's is also stored
    (through the writer's queue, not waited for), so that a chart a request had to compute
    before the keeper came to it is computed once, not once per process and expiry."""
    read = embedded_timeseries(store, job_id, reader, scrape_interval_seconds)
    row = stored_document(job_id, read)
    if read.summarised:
        written = stored.write_documents(store, TIMESERIES, [row], now=utcnow(), remember=True)
        written.add_done_callback(_log_failure)
    return row.body, row.etag


def _log_failure(written: Future[int]) -> None:
    error = written.exception()
    if error is not None:  # the keeper stores it later; the answer was served all the same
        log.warning("storing a computed time series failed: %s", error)


def stored_timeseries(store: Store, job_id: str) -> tuple[bytes, str] | None:
    """The stored time series of ``job_id`` (its body and ETag), or None."""
    return stored.read_document(store, job_id, TIMESERIES)


def remembered_timeseries(store: Store, job_id: str) -> tuple[bytes, str] | None:
    """:func:`stored_timeseries` of a job this process stored and still holds in memory (the
    keeper's and the requests' writes), else None: a lookup, never a query, so that the event
    loop answers a first read of it."""
    return stored.remembered_document(store, job_id, TIMESERIES)


def forget_after_retention(
    store: Store, *, raw_before: datetime | None, rollups_before: datetime | None
) -> int:
    """Drop the stored time series that read what retention deleted (raw samples before
    ``raw_before`` of a store without a cold tier, rollup minutes before ``rollups_before``)."""
    return stored.forget_read_before(
        store, TIMESERIES, raw_before=raw_before, rollups_before=rollups_before
    ).result()


class DocumentKeeper(PassKeeper):
    """After a collector cycle, a pass of :func:`store_timeseries` on a thread of its own
    (:class:`~hpcscope.service.keeper.PassKeeper`; a pass stops after its job when stopped)."""

    def __init__(
        self,
        store: Store,
        *,
        scrape_interval_seconds: float,
        metrics: GpuMetrics | None = None,
        start: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        super().__init__(name="hpcscope-job-documents", start=start)
        self.store = store
        self.scrape_interval_seconds = scrape_interval_seconds
        self.metrics = metrics

    @property
    def stored(self) -> int:
        """Time series stored so far."""
        return self.done

    def rest_share(self) -> float:
        """:data:`REST_SHARE`, or 0 while a whole pass of jobs waits: each job left is a
        request that computes it."""
        behind = len(stored.jobs_without(self.store, TIMESERIES, limit=PASS_JOBS)) >= PASS_JOBS
        return 0.0 if behind else REST_SHARE

    def work(self) -> int:
        share = self.rest_share()
        return store_timeseries(
            self.store,
            scrape_interval_seconds=self.scrape_interval_seconds,
            metrics=self.metrics,
            most=PASS_JOBS,
            pause=lambda seconds: self.stopping.wait(seconds * share),
        )
