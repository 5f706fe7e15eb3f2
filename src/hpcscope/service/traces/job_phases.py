"""The phase answer of one job: its captured windows, their stragglers, and the evidence.

Reads ``trace_captures`` for a job the caller has already checked the principal may see,
adds the telemetry evidence of the straggler's GPU, node and storage over each window
(:func:`~hpcscope.service.traces.job_evidence.add_job_evidence`, recomputed once per data
generation: samples may have arrived after the window was analysed), and shapes
:class:`JobPhases`.
A job without a window says why, and how to switch capture on.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hpcscope.analysis.traces.rank_timeline import PHASES
from hpcscope.model.capture import StoredCapture
from hpcscope.model.timeutil import iso_z
from hpcscope.service.traces.capture_contracts import (
    CaptureWindowDocument,
    JobPhases,
    PhaseStraggler,
    RankPlacement,
)
from hpcscope.service.traces.contracts import EvidenceItem
from hpcscope.service.traces.document import CapturePayloadJson
from hpcscope.service.traces.job_evidence import add_job_evidence
from hpcscope.store.captures import captured_job_ids, job_captures

if TYPE_CHECKING:
    from hpcscope.model.access import Principal
    from hpcscope.service.core import SeenJob, Service

HOW_TO_ENABLE = (
    "set capture_dir= (and capture_spool_dir in the server's settings to the same path) and "
    "TaskProlog= in slurm.conf (deploy/slurm/README.md, docs/capture.md): every PyTorch job "
    "then profiles a few steps every capture_every_seconds, with no change to its script"
)


def job_phases(service: Service, principal: Principal, job_id: str) -> JobPhases | None:
    """The job's phases, or None when the job is not visible to ``principal``."""
    # the access check alone: building the job's report here would compute it a second time
    # on the job page and its document, which have their own (the read path's hot spot)
    job = service.visible_job(principal, job_id)
    return None if job is None else phases_of(service, job)


def phases_of(service: Service, job: SeenJob) -> JobPhases:
    """The phases of a job its principal may see (:meth:`Service.visible_job`)."""
    # the jobs with a capture, once per generation: any other one has none to read
    captured = service.snapshots.get(
        ("traces.captured_jobs",), lambda: captured_job_ids(service.store)
    )
    if job.job_id not in captured:
        return _none(service, job.job_id)
    # the same for everyone who may see the job: once per generation (service/snapshots.py),
    # a finished job's at most every minute
    return service.snapshots.get(
        ("traces.phases", job.job_id),
        lambda: _phases(service, job.job_id),
        every_seconds=job.every_seconds,
    )


def _phases(service: Service, job_id: str) -> JobPhases:
    rows = job_captures(service.store, job_id)
    if not rows:
        return _none(service, job_id)
    return JobPhases(
        job_id=job_id,
        captured=True,
        reason=None,
        how_to_enable=None,
        windows=[window_document(service, job_id, row) for row in rows],
    )


def _none(service: Service, job_id: str) -> JobPhases:
    """The answer of a job without a capture window: why, and how to switch capture on."""
    configured = service.settings.capture.spool_dir is not None
    reason = (
        f"no capture window from job {job_id} yet: the capture profiles PyTorch jobs that "
        "step an optimizer, the first window after the first steps (capture_first_step), "
        "then one every capture_every_seconds; a job started before capture was switched "
        "on, or that is not PyTorch, has none"
        if configured
        else "trace capture is not switched on for this site (no capture_spool_dir)"
    )
    return JobPhases(
        job_id=job_id, captured=False, reason=reason, how_to_enable=HOW_TO_ENABLE, windows=[]
    )


def _mean_phases(values: list[dict[str, float]]) -> dict[str, float]:
    return {p: sum(float(v[p] or 0.0) for v in values) / len(values) for p in PHASES}


def window_document(service: Service, job_id: str, row: StoredCapture) -> CaptureWindowDocument:
    """One stored window as its document, with the evidence from the job's telemetry."""
    payload: CapturePayloadJson = json.loads(row.result_json)  # as the capture spool stored it
    document = payload["analysis"]
    add_job_evidence(service, document, job_id)
    placement = {
        rank: RankPlacement(node=p["node"], gpu=p["gpu"], verified=p["job_id"] == job_id)
        for rank, p in sorted(payload["placement"].items(), key=lambda kv: int(kv[0]))
    }
    by_node: dict[str, list[dict[str, float]]] = {}
    for rank, phases in document["phases"].items():
        where = placement.get(rank)
        by_node.setdefault(where.node if where is not None else "unknown", []).append(phases)
    straggler = None
    if document["stragglers"]:
        top = max(document["stragglers"], key=lambda s: s["excess_seconds_per_step"] or 0)
        where = placement.get(str(top["rank"]))
        straggler = PhaseStraggler(
            rank=int(top["rank"]),
            node=where.node if where is not None else None,
            gpu=where.gpu if where is not None else None,
            phase=top["phase"],
            delay_seconds_per_step=top["excess_seconds_per_step"],
            phase_delay_seconds_per_step=top["phase_excess_seconds_per_step"].get(top["phase"]),
            score=top["score"],
            hint=top["hint"],
            evidence=[EvidenceItem.model_validate(e) for e in top["evidence"]],
        )
    return CaptureWindowDocument.model_validate(
        {
            "window": row.capture_window,
            "start_utc": iso_z(row.window_start) if row.window_start else None,
            "end_utc": iso_z(row.window_end) if row.window_end else None,
            "ranks": row.ranks,
            "world_size": row.world_size,
            "steps": row.steps,
            "step_numbers": document["step_numbers"],
            "nodes": list(row.nodes),
            "attribution": row.attribution,
            "notes": list(row.notes),
            "straggler": straggler,
            "what_if": document["what_if"],
            "what_if_gain_seconds_per_step": row.what_if_gain_seconds_per_step,
            "phases_per_rank": document["phases"],
            "step_seconds_per_rank": document["step_seconds"],
            "phases_per_node": {n: _mean_phases(v) for n, v in sorted(by_node.items())},
            "per_step": document["per_step"],
            "placement": placement,
            "evidence_notes": document.get("evidence_notes", []),
            "nccl_logs": payload.get("nccl_logs", []),
            "flight_recorder": payload.get("flight_recorder", []),
            "comm_classes": document.get("comm_classes"),
        }
    )
