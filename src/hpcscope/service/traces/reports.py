"""Trace analyses in the server: analyse uploads (or, for admins, a server-side directory),
store the result, list and show what a principal may see, link an analysis to a job, and add
evidence from the job's telemetry (:mod:`hpcscope.service.traces.job_evidence`).

Visibility (applied in SQL by :mod:`hpcscope.store.traces`): a researcher sees their own
analyses, a team lead also those of the accounts they coordinate, an admin all of them. An
analysis is linked to a job only if the principal may see that job
(:meth:`Service.job_report` returns None otherwise, for a missing job and for someone else's
alike), and only by its owner or an admin.

Parsing runs in the calling thread (the web routes call these functions off the event loop)
and, for large uploads, in a process pool the service creates once with ``forkserver`` (never
fork a process that holds the DuckDB file).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hpcscope.model.access import Principal
from hpcscope.model.errors import AccessError, SourceError
from hpcscope.model.timeutil import parse_iso_utc, utcnow
from hpcscope.model.trace_analysis import StoredAnalysis
from hpcscope.service.traces.contracts import StoredTraceReport, TraceReport
from hpcscope.service.traces.document import AnalysisJson
from hpcscope.service.traces.inputs import IN_PROCESS_JSON_BYTES, find_traces, plan_workers
from hpcscope.service.traces.job_evidence import add_job_evidence
from hpcscope.service.traces.pipeline import analyze, to_json
from hpcscope.store import traces as queries

if TYPE_CHECKING:
    from hpcscope.service.core import Service


class TraceAccessError(AccessError):
    """The principal may not do this (admin-only action, a job they may not see)."""


_POOL_LOCK = threading.Lock()
_POOLS: dict[int, Executor] = {}


def _executor(service: Service, total_bytes: int, items: int) -> Executor | None:
    """The service's parse pool (created once, ``forkserver``), for inputs worth it."""
    if items < 2 or total_bytes < IN_PROCESS_JSON_BYTES:
        return None
    with _POOL_LOCK:
        pool = _POOLS.get(id(service))
        if pool is None:
            workers = max(1, min(os.cpu_count() or 1, 8))
            context = multiprocessing.get_context("forkserver")
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
            _POOLS[id(service)] = pool
        return pool


def shutdown_pools() -> None:
    """Stop the parse pools (server shutdown)."""
    with _POOL_LOCK:
        for pool in _POOLS.values():
            pool.shutdown(wait=False, cancel_futures=True)
        _POOLS.clear()


def _owner_accounts(service: Service, user: str) -> tuple[str, ...]:
    record = service.users.get(user)
    accounts = set(record.accounts if record else ()) | set(record.coordinates if record else ())
    accounts |= set(queries.account_memberships(service.store, user))
    return tuple(sorted(accounts))


def _visible_job_account(service: Service, principal: Principal, job_id: str) -> str | None:
    report = service.job_report(principal, job_id)
    if report is None:
        raise TraceAccessError(f"no job {job_id} visible to you")
    return report.account


def analyze_and_store(
    service: Service,
    principal: Principal,
    paths: Sequence[Path],
    *,
    source_names: Sequence[str],
    job_id: str | None = None,
    threshold: float = 0.75,
    upload_dir: Path | None = None,
    now: datetime | None = None,
) -> StoredAnalysis:
    """Analyse per-rank traces, add hardware evidence when linked to a job, store the result.

    Args:
        service: the running service.
        principal: who asks (becomes the owner).
        paths: trace files or directories on the server (an upload's temporary directory).
        source_names: how to name the inputs to the user (the uploaded file names).
        job_id: link to this job; it must be visible to ``principal``.
        threshold: straggler score threshold.
        upload_dir: the temporary directory of an upload (stripped from the file names).

    Raises:
        SourceError: unreadable traces (file and position named).
        TraceAccessError: ``job_id`` is not visible to ``principal``.
    """
    account = _visible_job_account(service, principal, job_id) if job_id else None
    items = find_traces(paths)
    total = sum(i.json_bytes for i in items)
    executor = _executor(service, total, len(items)) if plan_workers(items, None) > 1 else None
    # never "fork": this process holds the DuckDB file (no forked helper, no fork pool)
    result = analyze(paths, threshold=threshold, executor=executor, start_method="forkserver")
    document = to_json(result)
    if upload_dir is not None:
        _strip_temporary(document, upload_dir)
    if job_id:
        add_job_evidence(service, document, job_id)
    window = document.get("window")
    row = StoredAnalysis(
        analysis_id=secrets.token_hex(8),
        owner_user=principal.name,
        owner_accounts=_owner_accounts(service, principal.name),
        job_id=job_id,
        account=account,
        created=now or utcnow(),
        source_names=tuple(source_names),
        ranks=len(document["ranks"]),
        steps=int(document["steps"]),
        partial=bool(document["partial"]),
        slowdown=document["what_if"]["slowdown"],
        straggler_ranks=tuple(int(s["rank"]) for s in document["stragglers"]),
        window_start=parse_iso_utc(window["start_utc"]) if window else None,
        window_end=parse_iso_utc(window["end_utc"]) if window else None,
        result_json=json.dumps(document),
    )
    queries.insert_analysis(service.store, row)
    service.note_change("traces")
    return row


def analyze_server_directory(
    service: Service,
    principal: Principal,
    directory: str,
    *,
    job_id: str | None = None,
    threshold: float = 0.75,
) -> StoredAnalysis:
    """Admins only: analyse traces that already sit on the server (a shared file system).

    Raises:
        TraceAccessError: not an admin, or a job the admin cannot see (there is none).
        SourceError: no such directory, or unreadable traces.
    """
    if not principal.is_admin:
        raise TraceAccessError("only admins may analyse a directory on the server")
    path = Path(directory)
    if not path.is_absolute():
        raise SourceError("give an absolute path on the server", source=directory)
    if not path.exists():
        raise SourceError("no such file or directory on the server", source=directory)
    return analyze_and_store(
        service, principal, [path], source_names=[str(path)], job_id=job_id, threshold=threshold
    )


def _strip_temporary(document: AnalysisJson, directory: Path) -> None:
    """Show the uploaded file names, not the server's temporary directory."""
    prefix = str(directory) + os.sep
    for source in document["sources"]:
        if source["file"].startswith(prefix):
            source["file"] = source["file"][len(prefix) :]


def list_analyses(service: Service, principal: Principal) -> list[StoredAnalysis]:
    """The analyses ``principal`` may see, newest first."""
    return queries.visible_analyses(service.store, principal.job_scope())


def get_analysis(
    service: Service, principal: Principal, analysis_id: str
) -> tuple[StoredAnalysis, AnalysisJson] | None:
    """One analysis and its document, or None when it does not exist or is not visible. The
    hardware evidence is recomputed from the linked job's telemetry on every read (samples
    may have arrived after the analysis was made)."""
    row = queries.get_analysis(service.store, analysis_id, principal.job_scope())
    if row is None:
        return None
    document: AnalysisJson = json.loads(row.result_json)  # as stored: the contract decides
    if row.job_id and service.job_report(principal, row.job_id) is not None:
        add_job_evidence(service, document, row.job_id)
    return row, document


def get_report(
    service: Service, principal: Principal, analysis_id: str
) -> TraceReport | StoredTraceReport | None:
    """:func:`get_analysis` as the ``GET /api/traces/{id}`` document (summary, document with
    the linked job's evidence, chart), or None when it does not exist or is not visible."""
    found = get_analysis(service, principal, analysis_id)
    return None if found is None else TraceReport.of(*found)


def link_analysis(
    service: Service, principal: Principal, analysis_id: str, job_id: str | None
) -> StoredAnalysis:
    """Link an analysis to a job (or unlink with None).

    Raises:
        TraceAccessError: the analysis is not visible, not the principal's (admins excepted),
            or the job is not visible to the principal.
    """
    row = queries.get_analysis(service.store, analysis_id, principal.job_scope())
    if row is None:
        raise TraceAccessError(f"no analysis {analysis_id} visible to you")
    if row.owner_user != principal.name and not principal.is_admin:
        raise TraceAccessError("only the owner of an analysis (or an admin) may link it")
    account = _visible_job_account(service, principal, job_id) if job_id else None
    queries.link_job(service.store, analysis_id, job_id=job_id, account=account)
    service.note_change("traces")
    found = queries.get_analysis(service.store, analysis_id, principal.job_scope())
    if found is None:  # pragma: no cover - the owner always sees their own analysis
        raise TraceAccessError(f"no analysis {analysis_id} visible to you")
    return found
