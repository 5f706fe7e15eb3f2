"""What the telemetry rules share: jobs and their owners, time windows, runs, the alert builder.

Attribution (``security.md`` §0): telemetry names a node (IB counters, Lustre ``host``), a
GPU (DCGM's ``gpu`` label, the HCA beside it) or a job (``hpc_job``, Lustre's jobid); the job's
user and account are Slurm's (the store's ``jobs``), and a node's job at a time is the job whose
allocation holds the node then (:class:`JobSpan`).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Severity, merge_alerts
from hpcscope.model.timeutil import as_naive_utc, iso_z, parse_iso_utc

#: Evidence items kept per merged alert.

PortKey = tuple[str, str, int]
"""(node, device, port) of one HCA port."""


@dataclass(frozen=True, slots=True)
class JobSpan:
    """A Slurm job as the rules need it: owner, placement and life.

    Attributes:
        job_id: hpcscope's job id.
        user / account: Slurm's (None when unknown).
        nodes: the nodes the job holds (expanded hostlist).
        start / end: naive UTC; ``end`` None while it runs.
        partition / qos: what the job was submitted to (training vs curation, DP-1/DP-4).
    """

    job_id: str
    user: str | None
    account: str | None
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None = None
    partition: str | None = None
    qos: str | None = None

    def running(self, ts: datetime) -> bool:
        """Whether the job held its nodes at ``ts``."""
        if self.start is None or ts < self.start:
            return False
        return self.end is None or ts <= self.end


def jobs_on(jobs: Iterable[JobSpan], node: str, ts: datetime) -> list[JobSpan]:
    """The jobs holding ``node`` at ``ts``, by job id."""
    return sorted((j for j in jobs if node in j.nodes and j.running(ts)), key=lambda j: j.job_id)


def jobs_by_node(jobs: Iterable[JobSpan]) -> dict[str, list[JobSpan]]:
    """Node -> the jobs that ever held it, by job id: a series of a node's points asks only
    these (:func:`jobs_on` over every job for every point was most of an evaluation at 128
    nodes and an hour of reads)."""
    out: dict[str, list[JobSpan]] = {}
    for job in sorted(jobs, key=lambda j: j.job_id):
        for node in dict.fromkeys(job.nodes):
            out.setdefault(node, []).append(job)
    return out


def first_running(node_jobs: Sequence[JobSpan], ts: datetime) -> JobSpan | None:
    """The first job by id of a node's ``node_jobs`` holding it at ``ts`` (``jobs_on(...)[0]``)."""
    for job in node_jobs:
        if job.running(ts):
            return job
    return None


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A maintenance or known-faulty window: nodes matching ``node_pattern`` (shell glob)
    between ``start`` and ``end`` (naive UTC, inclusive)."""

    node_pattern: str
    start: datetime
    end: datetime

    def covers(self, node: str, ts: datetime) -> bool:
        return self.start <= ts <= self.end and fnmatch.fnmatchcase(node, self.node_pattern)


def parse_windows(items: Iterable[str]) -> tuple[TimeWindow, ...]:
    """Windows written ``"<node glob> <start RFC 3339> <end RFC 3339>"`` (a rule-file list).

    Raises:
        ValueError: an item that is not three fields, a time that does not parse, or an end
            before its start (the message quotes the item).
    """
    windows: list[TimeWindow] = []
    for item in items:
        parts = item.split()
        if len(parts) != 3:
            raise ValueError(f"window {item!r}: want '<node glob> <start> <end>'")
        try:
            start, end = parse_iso_utc(parts[1]), parse_iso_utc(parts[2])
        except ValueError as exc:
            raise ValueError(f"window {item!r}: {exc}") from None
        if end < start:
            raise ValueError(f"window {item!r}: ends before it starts")
        windows.append(TimeWindow(parts[0], as_naive_utc(start), as_naive_utc(end)))
    return tuple(windows)


def covered(windows: Iterable[TimeWindow], node: str, ts: datetime) -> bool:
    """Whether one of ``windows`` covers ``node`` at ``ts``."""
    return any(w.covers(node, ts) for w in windows)


def runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive true flags, as ``(first, last)`` indexes (inclusive)."""
    found: list[tuple[int, int]] = []
    start: int | None = None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            found.append((start, i - 1))
            start = None
    if start is not None:
        found.append((start, len(flags) - 1))
    return found


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def median(values: Sequence[float]) -> float | None:
    """The median of ``values`` (mean of the middle two); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def robust_sigma(values: Sequence[float]) -> float:
    """The standard deviation of normal noise, robust to outliers: the standard deviation of
    the values within 5 MAD-sigmas (1.4826 x the median absolute deviation) of the median.

    The MAD alone is robust but inefficient (37 % for normal noise): over a 20-point
    calibration window it underestimates sigma by a third or more one time in twelve, and a
    3-sigma threshold then fires on noise. The one-step trimmed deviation keeps the MAD's
    robustness to a few outliers at close to the full efficiency of the standard deviation
    (the cut at 5 sigmas truncates normal noise by less than 1e-4 of its deviation).
    """
    centre = median(values)
    if centre is None:
        return 0.0
    mad_sigma = 1.4826 * (median([abs(v - centre) for v in values]) or 0.0)
    kept = [v for v in values if abs(v - centre) <= 5.0 * mad_sigma]
    if len(kept) < 2:
        return mad_sigma
    mean = sum(kept) / len(kept)
    deviation = math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1))
    return deviation


def megabytes(value: float) -> str:
    """``"123.4 MB"`` (10^6 bytes), for evidence lines."""
    return f"{value / 1e6:.1f} MB"


def telemetry_alert(
    spec: RuleSpec,
    *,
    first_seen: datetime,
    last_seen: datetime,
    node: str | None,
    job: JobSpan | None,
    gpu: int | None,
    subject: str | None,
    summary: str,
    source: str,
    position: str | None = None,
    severity: Severity | None = None,
    link: str | None = None,
) -> Alert:
    """One firing of a telemetry rule, attributed (job owner from Slurm) with its evidence."""
    return Alert(
        rule_id=spec.rule_id,
        vector=spec.vector,
        severity=severity or spec.severity,
        title=spec.title,
        first_seen=first_seen,
        last_seen=last_seen,
        node=node,
        job_id=None if job is None else job.job_id,
        user=None if job is None else job.user,
        account=None if job is None else job.account,
        gpu=gpu,
        subject=subject,
        evidence=(Evidence(summary=summary, source=source, position=position, link=link),),
    )


def span_text(first: datetime, last: datetime) -> str:
    """``"2026-12-01T12:00:00Z..12:05:00Z (300 s)"`` for evidence."""
    seconds = (last - first).total_seconds()
    return f"{iso_z(first)}..{iso_z(last)} ({seconds:.0f} s)"


@dataclass(frozen=True, slots=True)
class GpuAllocation:
    """One job's hold on one GPU (``job_allocations``), ``end`` None while it runs."""

    job_id: str
    node: str
    gpu: int
    start: datetime
    end: datetime | None

    def holds(self, ts: datetime) -> bool:
        return self.start <= ts and (self.end is None or ts <= self.end)


def merge(alerts: Iterable[Alert]) -> list[Alert]:
    """:func:`hpcscope.model.alerts.merge_alerts`, sorted by rule, first seen and key."""
    return sorted(merge_alerts(alerts), key=lambda a: (a.rule_id, a.first_seen, a.key))


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def enabled(rules: Mapping[str, RuleSpec], rule_id: str) -> RuleSpec | None:
    """The rule when the site has it and it is enabled."""
    spec = rules.get(rule_id)
    return spec if spec is not None and spec.enabled else None


def port_subject(port: tuple[str, int]) -> str:
    """``"port mlx5_3/1"``: the subject of a port's alert."""
    return f"port {port[0]}/{port[1]}"


def port_gpu(port_gpus: Mapping[PortKey, int], node: str, port: tuple[str, int]) -> int | None:
    """The GPU beside ``port`` of ``node`` (None when the map does not know it)."""
    return port_gpus.get((node, port[0], port[1]))


def job_at(jobs: Sequence[JobSpan], node: str, ts: datetime) -> JobSpan | None:
    """The job holding ``node`` at ``ts`` (the first by id), or None."""
    held = jobs_on(jobs, node, ts)
    return held[0] if held else None
