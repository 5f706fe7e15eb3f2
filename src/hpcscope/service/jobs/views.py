"""Finished jobs' page parts, stored once: a first read of a job's page is one keyed row.

What a job's page shows of its report (the figures, the notes, the GPUs) is the same for
every reader and, once the job is summarised, no longer changes. The web app renders those
parts and stores them here (``store/job_documents.py``, one row per job and kind) as one body,
beside the report document they were rendered from; a later read compares that document with
the current report's and uses the parts only when they are equal, so a late summary, a
changed scheduler record or retention that drops the summary renders them again. The kind
names the parts' version (:func:`view_kind`): another version of the templates, of hpcscope or
of the site's notes thresholds is another kind, whose rows are never read (and are dropped,
:func:`forget_other_views`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from concurrent.futures import Future

from hpcscope import __version__
from hpcscope.model.timeutil import utcnow
from hpcscope.store import job_documents as stored
from hpcscope.store.duck import Store

#: The kinds of stored page parts start with this.
VIEW_PREFIX = "job_view:"


def view_kind(parts: Iterable[bytes]) -> str:
    """The kind page parts rendered from ``parts`` (template sources, settings) are stored
    as: :data:`VIEW_PREFIX` and a fingerprint of them and of hpcscope's version."""
    digest = hashlib.blake2b(__version__.encode(), digest_size=8)
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return VIEW_PREFIX + digest.hexdigest()


def stored_view(store: Store, job_id: str, kind: str) -> bytes | None:
    """The stored page parts of ``job_id`` of ``kind``, or None."""
    found = stored.read_document(store, job_id, kind)
    return None if found is None else found[0]


def store_views(store: Store, kind: str, views: Sequence[tuple[str, bytes]]) -> Future[int]:
    """Store page parts (job id, body) as ``kind`` (replacing a job's earlier ones)."""
    documents = [
        stored.JobDocument(job_id, hashlib.blake2b(body, digest_size=16).hexdigest(), body)
        for job_id, body in views
    ]
    return stored.write_documents(store, kind, documents, now=utcnow())


def summarised_without_view(store: Store, kind: str, *, limit: int) -> list[str]:
    """Summarised jobs without page parts of ``kind``, the latest ended first."""
    return stored.jobs_without(store, kind, limit=limit)


def forget_other_views(store: Store, kind: str) -> Future[int]:
    """Drop the stored page parts of every other version than ``kind``."""
    return stored.forget_other_kinds(store, VIEW_PREFIX, kind)
