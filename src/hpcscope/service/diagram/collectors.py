"""Health of hpcscope's own collection, per collector of the catalog.

The diagram's Observe mode draws every collector the catalog knows (slurm-exporter,
dcgm-exporter, node-exporter, Falco, ...) and says how hpcscope's own collection from it is
doing (ok, stale, failing, configured another way, or not configured) and when it last brought
something in (``last_event_ts``), from what was actually collected:

* scraped exporters, the scheduler's polls and tailed files (Falco, Tetragon): the ``scrapes``
  table (one row per attempt, with its outcome and the rows it brought), over a recent window;
  several exporter names may stand for one collector (:data:`COLLECTOR_EXPORTERS`);
* the PyTorch profiler and NCCL logs: the golden path's captures (``trace_captures``: a window
  analysed, a window with NCCL debug logs), when a capture spool is set;
* eBPF on checkpoints: the accesses to protected paths the sensors recorded (``file_access``),
  when a Tetragon export (or the bpftrace sensor's) is tailed.

"not configured" means nothing is set for that collector.

The figures name no job and no user, so they are the same for every viewer, anonymous
visitors included. :mod:`hpcscope.service.diagram.live` puts them into the live state, and
:mod:`hpcscope.service.diagram.cards` onto the collector and source cards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypedDict

from hpcscope.model.catalog import Collector
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.service.core import Service
from hpcscope.store import activity
from hpcscope.store import diagram as queries
from hpcscope.store.diagram import ScrapeHealth

#: Window over which collector failures are counted.
HEALTH_WINDOW_SECONDS = 15 * 60.0

#: Exporter names (``scrapes.exporter``) that stand for each collector of the catalog.
COLLECTOR_EXPORTERS: Mapping[str, tuple[str, ...]] = {
    "slurm-exporter": ("slurm-exporter", "slurm", "slurmrestd", "slurm-commands", "sacct"),
    "dcgm-exporter": ("dcgm-exporter", "dcgm"),
    "node-exporter": ("node-exporter", "node"),
    "falco": ("falco",),
    "tetragon": ("tetragon",),
    "pytorch-profiler": ("pytorch-profiler", "kineto"),
    "nccl-logs": ("nccl-logs", "nccl"),
    # node_exporter's infiniband collector reads the same port counters perfquery reads (sysfs)
    "ib-counters": ("ib-counters", "perfquery", "ibstat", "infiniband", "node"),
    "lustre-metrics": ("lustre-metrics", "lustre", "lustre-jobstats"),
    "ebpf-checkpoints": ("ebpf-checkpoints",),
}

#: Collectors read through the golden path's captures (``capture_spool_dir``).
CAPTURED = ("pytorch-profiler", "nccl-logs")


class CollectorStatus(StrEnum):
    """Health of hpcscope's own collection from one collector."""

    OK = "ok"
    STALE = "stale"
    FAILING = "failing"
    CONFIGURED = "configured"  # set up, but hpcscope records no per-attempt health for it
    NOT_CONFIGURED = "not-configured"


@dataclass(frozen=True, slots=True)
class CollectorHealth:
    """A collector of Observe mode and how hpcscope's own collection from it is doing."""

    id: str
    name: str
    observes: tuple[str, ...]
    signals: str
    status: CollectorStatus
    exporters: tuple[str, ...] = ()
    targets: int = 0
    last_scrape_ts: datetime | None = None
    last_ok_ts: datetime | None = None
    staleness_seconds: float | None = None
    scrapes_in_window: int = 0
    failures_in_window: int = 0
    failing_targets: int = 0
    rejected_lines_in_window: int = 0
    last_error: str | None = None
    window_seconds: float = HEALTH_WINDOW_SECONDS
    note: str | None = None
    last_event_ts: datetime | None = None
    """When it last brought something in (rows of a scrape, a line of a tail, a capture)."""


class _Base(TypedDict):
    """What every :class:`CollectorHealth` of a collector says, whatever its source."""

    id: str
    name: str
    observes: tuple[str, ...]
    signals: str
    last_event_ts: datetime | None


def collector_health(
    service: Service, *, now: datetime, collectors: Iterable[Collector] | None = None
) -> tuple[CollectorHealth, ...]:
    """Health of every collector of the catalog from the ``scrapes`` table."""
    since = now - timedelta(seconds=HEALTH_WINDOW_SECONDS)
    rows = {r["exporter"]: r for r in queries.scrape_health(service.store, since=since)}
    data = activity.last_data(service.store, since=since)
    stale_after = max_sample_weight_seconds(service.settings.scrape_interval_seconds)
    out: list[CollectorHealth] = []
    for collector in collectors if collectors is not None else service.catalog.collectors:
        names = COLLECTOR_EXPORTERS.get(collector.id, (collector.id,))
        found = [rows[name] for name in names if name in rows]
        events = [ts for n in names if n in data and (ts := data[n]["last_ts"]) is not None]
        base: _Base = {
            "id": collector.id,
            "name": collector.name,
            "observes": tuple(kind.value for kind in collector.observes),
            "signals": collector.signals,
            "last_event_ts": max(events) if events else None,
        }
        if collector.id in CAPTURED:
            out.append(_captured(service, collector.id, base, now=now, since=since))
            continue
        if collector.id == "ebpf-checkpoints":
            out.append(_checkpoint_sensor(service, rows, base, since=since))
            continue
        if not found:
            out.append(_configured_elsewhere(service, collector.id, base))
            continue
        last_ts = max(r["last_ts"] for r in found)
        oks = [r["last_ok_ts"] for r in found if r["last_ok_ts"] is not None]
        last_ok = max(oks) if oks else None
        staleness = (now - last_ok).total_seconds() if last_ok is not None else None
        failing = sum(int(r["failing_targets"]) for r in found)
        errors = [(r["last_ts"], r["last_error"]) for r in found if r["last_error"]]
        if failing:
            status = CollectorStatus.FAILING
        elif staleness is None or staleness > stale_after:
            status = CollectorStatus.STALE
        else:
            status = CollectorStatus.OK
        out.append(
            CollectorHealth(
                status=status,
                exporters=tuple(r["exporter"] for r in found),
                targets=sum(int(r["targets"]) for r in found),
                last_scrape_ts=last_ts,
                last_ok_ts=last_ok,
                staleness_seconds=staleness,
                scrapes_in_window=sum(int(r["scrapes"]) for r in found),
                failures_in_window=sum(int(r["failures"]) for r in found),
                failing_targets=failing,
                rejected_lines_in_window=sum(int(r["rejected_lines"]) for r in found),
                last_error=max(errors)[1] if errors else None,
                **base,
            )
        )
    return tuple(out)


def _configured_elsewhere(service: Service, collector_id: str, base: _Base) -> CollectorHealth:
    """A collector without scrape records: configured another way, or not configured."""
    settings = service.settings
    if collector_id == "slurm-exporter" and settings.slurm.url:
        note = (
            f"hpcscope reads the scheduler from slurmrestd ({settings.slurm.url}) every "
            f"{settings.slurm.poll_seconds:g} s instead of slurm-exporter; the health of "
            "those polls is not recorded yet."
        )
        return CollectorHealth(status=CollectorStatus.CONFIGURED, note=note, **base)
    return CollectorHealth(status=CollectorStatus.NOT_CONFIGURED, **base)


def _captured(
    service: Service, collector_id: str, base: _Base, *, now: datetime, since: datetime
) -> CollectorHealth:
    """The PyTorch profiler and NCCL logs, read through the golden path's captures."""
    seen = activity.capture_activity(service.store, since=since)[collector_id]
    base = {**base, "last_event_ts": seen["last_ts"]}
    recent = seen["recent"]
    if service.settings.capture.spool_dir is None and seen["last_ts"] is None:
        return CollectorHealth(
            status=CollectorStatus.NOT_CONFIGURED, scrapes_in_window=recent, **base
        )
    what = (
        "capture window analysed"
        if collector_id == "pytorch-profiler"
        else ("capture window with NCCL debug logs")
    )
    if seen["last_ts"] is None:
        note = f"captures are on ({service.settings.capture.spool_dir}); no {what} yet."
        return CollectorHealth(
            status=CollectorStatus.CONFIGURED, note=note, scrapes_in_window=recent, **base
        )
    staleness = (now - seen["last_ts"]).total_seconds()
    status = CollectorStatus.OK if seen["recent"] else CollectorStatus.STALE
    windows = "capture windows" if seen["recent"] != 1 else "capture window"
    note = (
        f"read through the golden path's captures: {seen['recent']} "
        f"{what.replace('capture window', windows)} lately."
    )
    return CollectorHealth(
        status=status,
        note=note,
        last_ok_ts=seen["last_ts"],
        staleness_seconds=staleness,
        scrapes_in_window=recent,
        **base,
    )


def _checkpoint_sensor(
    service: Service, rows: Mapping[str, ScrapeHealth], base: _Base, *, since: datetime
) -> CollectorHealth:
    """eBPF on checkpoints: the Tetragon export (or the bpftrace sensor's) tailed, and the
    accesses to protected paths it brought."""
    seen = activity.access_activity(service.store, since=since)
    base = {**base, "last_event_ts": seen["last_ts"]}
    recent = seen["recent"]
    tail = rows.get("tetragon")
    if service.settings.tetragon.events_path is None and tail is None and not seen["last_ts"]:
        return CollectorHealth(
            status=CollectorStatus.NOT_CONFIGURED, scrapes_in_window=recent, **base
        )
    note = (
        f"accesses to the checkpoint and weight roots, read from the eBPF events "
        f"({service.settings.tetragon.events_path}): {seen['recent']} lately."
    )
    if tail is not None and int(tail["failing_targets"]):
        return CollectorHealth(
            status=CollectorStatus.FAILING,
            note=note,
            failing_targets=int(tail["failing_targets"]),
            targets=int(tail["targets"]),
            last_error=tail["last_error"],
            scrapes_in_window=recent,
            **base,
        )
    status = CollectorStatus.OK if tail is not None else CollectorStatus.CONFIGURED
    return CollectorHealth(
        status=status,
        note=note,
        last_ok_ts=None if tail is None else tail["last_ok_ts"],
        scrapes_in_window=recent,
        **base,
    )
