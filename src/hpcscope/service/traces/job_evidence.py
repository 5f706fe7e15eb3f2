"""Evidence for a traced job's stragglers from the telemetry hpcscope holds for the job.

Once an analysis is linked to a job (and the caller has checked the principal may see it), the
ranks are placed on the job's allocated GPUs
(:func:`~hpcscope.analysis.traces.rank_gpus.map_ranks_to_gpus`) and two sources are read over the
profiled window, widened by one scrape interval on each side (samples are seconds apart):

* the GPU samples of each rank's GPU (the metrics backend's ``samples_for_jobs``, which also
  name the job's GPUs when no allocation is recorded): hardware evidence (throttling, clocks,
  temperature, Xid), :func:`~hpcscope.analysis.traces.straggler_evidence.hardware_evidence`;
* the InfiniBand port counters of each rank's node (``ib_port_counters``, node_exporter):
  network evidence (errors, ports down),
  :func:`~hpcscope.analysis.traces.fabric_evidence.fabric_evidence`;
* the job's Lustre job_stats (``lustre_job_stats``, entries of ``jobid_name=%j:%u:%H`` name the
  client node): storage evidence for a data stall (read latency and throughput of the
  straggler's node against its peers' nodes),
  :func:`~hpcscope.analysis.traces.storage_evidence.storage_evidence`.

``evidence_notes`` says what was found and what was not (a node without counters, a rank that
could not be placed), so an empty section is never silent.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from hpcscope.analysis.jobs.efficiency import gpu_summary
from hpcscope.analysis.traces.fabric_evidence import fabric_evidence, node_fabric
from hpcscope.analysis.traces.rank_gpus import RankGpu, map_ranks_to_gpus, short_host
from hpcscope.analysis.traces.storage_evidence import node_storage, storage_evidence
from hpcscope.analysis.traces.straggler_evidence import Evidence, GpuTelemetry, hardware_evidence
from hpcscope.ingest.exporters.infiniband import COUNTER_WIDTH_BITS
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.timeutil import parse_iso_utc
from hpcscope.store import infiniband as ib_queries
from hpcscope.store import lustre as lustre_queries
from hpcscope.store import traces as queries

if TYPE_CHECKING:
    from hpcscope.analysis.traces.straggler_evidence import EvidenceJson
    from hpcscope.service.core import Service
    from hpcscope.service.traces.document import AnalysisJson

#: How far around the profiled window InfiniBand counter reads are looked for (node_exporter is
#: often scraped every 15-60 s; the reads that bracket the window are kept).
COUNTER_MARGIN_SECONDS = 300
#: Evidence items this module adds, recognised when a link is made again.
_TELEMETRY_SOURCES = ("infiniband", "lustre")


def _from_telemetry(item: EvidenceJson) -> bool:
    figures = item.get("figures") or {}
    return item["kind"] == "hardware" or figures.get("source") in _TELEMETRY_SOURCES


def _gpus(samples: pl.DataFrame) -> list[tuple[str, int]]:
    """The ``(node, gpu)`` pairs ``samples`` name, sorted."""
    pairs = samples.select("node", "gpu").unique().sort("node", "gpu")
    return [(str(r["node"]), int(r["gpu"])) for r in pairs.iter_rows(named=True)]


def add_job_evidence(service: Service, document: AnalysisJson, job_id: str) -> None:
    """Add hardware and fabric evidence from the job's telemetry in the profiled window to
    each straggler of ``document`` (in place), and say in ``evidence_notes`` what was (not)
    found. Evidence from an earlier link is replaced. The caller has checked that the job is
    visible."""
    notes: list[str] = []
    document["evidence_notes"] = notes
    for straggler in document["stragglers"]:
        straggler["evidence"] = [e for e in straggler["evidence"] if not _from_telemetry(e)]
    stragglers = [int(s["rank"]) for s in document["stragglers"]]
    if not stragglers:
        return
    window = document.get("window")
    since = parse_iso_utc(window["start_utc"]) if window else None
    until = parse_iso_utc(window["end_utc"]) if window else None
    if since is not None and until is not None:
        pad = timedelta(seconds=service.settings.scrape_interval_seconds)
        since, until = since - pad, until + pad
    metrics = service.gpu_samples()
    samples = pl.from_arrow(metrics.samples_for_jobs([job_id], since=since, until=until))
    assert isinstance(samples, pl.DataFrame)
    # the job's allocations, else the GPUs its samples name (in the window, else at any time)
    allocation = queries.job_allocation(service.store, job_id) or _gpus(samples)
    if not allocation and since is not None:
        anytime = pl.from_arrow(metrics.samples_for_jobs([job_id]))
        assert isinstance(anytime, pl.DataFrame)
        allocation = _gpus(anytime)
    if not allocation:
        notes.append(f"job {job_id}: no GPU allocation or sample is known, no hardware evidence")
        return
    mapping = map_ranks_to_gpus(
        [(int(s["rank"]), s.get("host"), s.get("gpu_index")) for s in document["sources"]],
        allocation,
    )
    data_ranks = [int(s["rank"]) for s in document["stragglers"] if s["phase"] == "data_load"]
    sources = (
        _hardware(service, document, job_id, mapping, samples, notes),
        _fabric(service, stragglers, mapping, since, until, notes),
        _storage(service, job_id, stragglers, data_ranks, mapping, since, until, notes),
    )
    found: dict[int, list[EvidenceJson]] = {}
    for by_rank in sources:
        for rank, items in by_rank.items():
            found.setdefault(rank, []).extend(e.to_dict() for e in items)
    for straggler in document["stragglers"]:
        rank = int(straggler["rank"])
        added = found.get(rank, [])
        supporting = [e for e in added if e["supports"]]
        ruled_out = [e for e in added if not e["supports"]]
        straggler["evidence"] = supporting + straggler["evidence"] + ruled_out
        where = mapping.get(rank)
        if where is None:
            notes.append(f"rank {rank}: could not be placed on an allocated GPU of job {job_id}")
        else:
            hardware = any(e["kind"] == "hardware" for e in added)
            notes.append(
                f"rank {rank} ran on node {where.node} GPU {where.gpu} (mapped by {where.how})"
                + ("" if hardware else "; no GPU samples for it and a peer in the window")
            )


def _hardware(
    service: Service,
    document: AnalysisJson,
    job_id: str,
    mapping: dict[int, RankGpu],
    samples: pl.DataFrame,
    notes: list[str],
) -> dict[int, tuple[Evidence, ...]]:
    samples = samples.sort(["node", "gpu", "ts"])
    if samples.height == 0:
        window = document.get("window")
        notes.append(
            f"job {job_id}: no GPU sample in the profiled window"
            + (f" ({window['start_utc']} to {window['end_utc']})" if window else "")
            + ", no hardware evidence"
        )
        return {}
    summary = gpu_summary(
        samples,
        max_interval_seconds=max_sample_weight_seconds(service.settings.scrape_interval_seconds),
    )
    counts = samples.group_by(["node", "gpu"]).len()
    per_gpu = {(r["node"], int(r["gpu"])): r for r in summary.to_dicts()}
    sample_counts = {(r["node"], int(r["gpu"])): int(r["len"]) for r in counts.to_dicts()}
    gpus: dict[int, GpuTelemetry] = {}
    for rank, placed in mapping.items():
        row = per_gpu.get((placed.node, placed.gpu))
        if row is None:
            continue
        gpus[rank] = GpuTelemetry(
            node=placed.node,
            gpu=placed.gpu,
            sm_clock_hertz=row["sm_clock_hertz"],
            max_temperature_celsius=row["max_temperature_celsius"],
            throttle_reasons=int(row["throttle_reasons"] or 0),
            slowdown_share=row["slowdown_share"],
            xid=int(row["xid"]) if row["xid"] else None,
            samples=sample_counts.get((placed.node, placed.gpu), 0),
            mapping=placed.how,
        )
    stragglers = [int(s["rank"]) for s in document["stragglers"]]
    return dict(hardware_evidence(stragglers, [int(r) for r in document["ranks"]], gpus))


def _fabric(
    service: Service,
    stragglers: list[int],
    mapping: dict[int, RankGpu],
    since: datetime | None,
    until: datetime | None,
    notes: list[str],
) -> dict[int, tuple[Evidence, ...]]:
    rank_nodes = {rank: placed.node for rank, placed in mapping.items()}
    nodes = sorted(set(rank_nodes.values()))
    fabric = {}
    if len(nodes) > 1:
        # counters are read every node_exporter scrape (often 15-60 s): read around the window
        # and keep, per port, the reads that bracket it
        margin = timedelta(seconds=COUNTER_MARGIN_SECONDS)
        rows = pl.from_arrow(
            ib_queries.ib_counters(
                service.store,
                nodes=nodes,
                since=since - margin if since else None,
                until=until + margin if until else None,
            )
        )
        assert isinstance(rows, pl.DataFrame)
        window = (since, until) if since is not None and until is not None else None
        fabric = node_fabric(rows, window=window, widths_bits=COUNTER_WIDTH_BITS)
    missing = [n for n in nodes if n not in fabric] if len(nodes) > 1 else []
    if missing:
        notes.append(
            f"node(s) {', '.join(missing)}: no InfiniBand counters in the profiled window "
            "(node_exporter's infiniband collector not scraped), no fabric evidence for them"
        )
    return dict(fabric_evidence(stragglers, rank_nodes, fabric))


def _storage(
    service: Service,
    job_id: str,
    stragglers: list[int],
    data_ranks: list[int],
    mapping: dict[int, RankGpu],
    since: datetime | None,
    until: datetime | None,
    notes: list[str],
) -> dict[int, tuple[Evidence, ...]]:
    """Storage evidence from the job's own job_stats entries, node against node."""
    margin = timedelta(seconds=COUNTER_MARGIN_SECONDS)
    rows = pl.from_arrow(
        lustre_queries.job_stats(
            service.store,
            job_ids=[job_id],
            since=since - margin if since else None,
            until=until + margin if until else None,
        )
    )
    assert isinstance(rows, pl.DataFrame)
    if rows.height == 0:
        notes.append(
            f"job {job_id}: no Lustre job_stats in the profiled window (Lustre spool not "
            "configured, or jobid_name does not carry the Slurm job id), no storage evidence"
        )
        return {}
    # Lustre's %H is the client's hostname, Slurm's node name may be its short form
    nodes = {short_host(placed.node): placed.node for placed in mapping.values()}
    rows = rows.with_columns(
        pl.col("host").map_elements(
            lambda h: nodes.get(short_host(h), h), return_dtype=pl.String, skip_nulls=True
        )
    )
    if rows["host"].null_count() == rows.height:
        notes.append(
            f"job {job_id}: its Lustre job_stats name no client node (set jobid_name to "
            "%j:%u:%H), no storage evidence node against node"
        )
        return {}
    window = (since, until) if since is not None and until is not None else None
    storage = node_storage(rows, window=window)
    rank_nodes = {rank: placed.node for rank, placed in mapping.items()}
    return dict(storage_evidence(stragglers, rank_nodes, storage, data_phase_ranks=data_ranks))
