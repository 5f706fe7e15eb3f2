"""Sections of the ``hpcscope nccl analyze --json`` document (contract: ``docs/nccl.md``).

Every function turns parsed records or analysis results into the typed sections of
:mod:`hpcscope.service.nccl.contracts`; units are in the field names (``_seconds``,
``_bytes_per_second``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from hpcscope.analysis.hangs.findings import Finding
from hpcscope.analysis.hangs.types import HangReport
from hpcscope.ingest.nccl.logs import NcclLogParse
from hpcscope.ingest.nccl.megatron_straggler import METRICS, StragglerExtreme, ThroughputRanking
from hpcscope.ingest.nccl.nccl_tests import NcclTestsMeasure, NcclTestsResult
from hpcscope.model.collectives import FlightRecorderDump, WatchdogEvent
from hpcscope.model.nccl import (
    BootstrapRecord,
    ChannelCountsRecord,
    CommInitRecord,
    ConnectionRecord,
    InitTimingsRecord,
    NcclRecord,
    NcclVersionRecord,
    NetRecord,
    RingRecord,
    SettingRecord,
    TopoCommRecord,
    TopoSystemRecord,
    TreeRecord,
)
from hpcscope.service.contract import Contract
from hpcscope.service.nccl import contracts as doc

_C = TypeVar("_C", bound=Contract)


def log_input(log: NcclLogParse) -> doc.LogInput:
    """One text input: line counts, record counts, unknown samples, warnings."""
    kinds: Counter[str] = Counter(type(r).__name__.removesuffix("Record") for r in log.nccl)
    kinds.update(f"watchdog.{e.kind.value}" for e in log.watchdog)
    kinds["nccl_tests.rows"] = sum(len(t.rows) for t in log.nccl_tests)
    kinds["megatron"] = len(log.stragglers)
    return doc.LogInput(
        path=log.source,
        kind="log",
        lines=log.lines,
        parsed_lines=log.parsed_lines,
        blank_lines=log.blank_lines,
        unknown_lines=log.unknown_lines,
        unknown_samples=[doc.LineSample(line=n, text=t) for n, t in log.unknown_samples],
        records={k: v for k, v in sorted(kinds.items()) if v},
        warnings=[doc.Problem.model_validate(w.to_dict()) for w in log.warnings],
    )


def dump_input(dump: FlightRecorderDump) -> doc.DumpInput:
    """One flight-recorder dump: rank, versions, sizes, warnings."""
    return doc.DumpInput(
        path=dump.source,
        kind="flight_recorder",
        rank=dump.rank,
        version=dump.version,
        nccl_version=dump.nccl_version,
        process_groups=len(dump.pg_configs),
        entries=len(dump.entries),
        states=dict(Counter(e.state for e in dump.entries)),
        warnings=[doc.DumpWarning(message=w, source=dump.source) for w in dump.warnings],
    )


def nccl_section(records: Sequence[NcclRecord]) -> doc.NcclSection:
    """Versions, processes and their transport, init, topology, rings, trees, connections."""
    processes = _processes(records)
    inits: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for r in records:
        if isinstance(r, CommInitRecord):
            inits[r.nranks][r.state.lower()].add(r.rank)
    connections = [r for r in records if isinstance(r, ConnectionRecord)]
    return doc.NcclSection(
        versions=_versions(records),
        processes=processes,
        transport_by_rank=sorted(
            (
                doc.RankTransport(rank=rank, process=p.process, net=p.net)
                for p in processes
                if p.net
                for rank in p.ranks
            ),
            key=lambda x: x.rank,
        ),
        init=[
            doc.InitProgress(
                nranks=n,
                ranks_started=sorted(states.get("start", set())),
                ranks_completed=sorted(states.get("complete", set())),
                ranks_started_not_completed=sorted(
                    states.get("start", set()) - states.get("complete", set())
                ),
            )
            for n, states in sorted(inits.items())
        ],
        init_timings=[
            doc.InitTimings(
                rank=r.rank,
                nranks=r.nranks,
                total_seconds=r.total_seconds,
                parts_seconds=r.parts_seconds,
            )
            for r in records
            if isinstance(r, InitTimingsRecord)
        ],
        topology=doc.Topology(
            comms=_unique(
                doc.TopoComm.model_validate(_fields(r))
                for r in records
                if isinstance(r, TopoCommRecord)
            ),
            system=[
                doc.TopoSystem(
                    max_bw_bytes_per_second=r.max_bw_bytes_per_second,
                    total_bw_bytes_per_second=r.total_bw_bytes_per_second,
                    process=r.origin.process if r.origin else None,
                )
                for r in records
                if isinstance(r, TopoSystemRecord)
            ],
        ),
        rings=_unique(
            doc.Ring(channel=r.channel, nchannels=r.nchannels, order=list(r.order))
            for r in records
            if isinstance(r, RingRecord)
        ),
        trees=_unique(
            doc.Tree(channel=r.channel, rank=r.rank, parent=r.parent, children=list(r.children))
            for r in records
            if isinstance(r, TreeRecord)
        ),
        connections=doc.Connections(
            count=len(connections),
            by_transport=dict(Counter(c.transport for c in connections)),
            by_via=dict(Counter(c.via for c in connections)),
            items=_unique(
                doc.Connection(
                    channel=c.channel,
                    src_rank=c.src_rank,
                    dst_rank=c.dst_rank,
                    direction=c.direction,
                    via=c.via,
                )
                for c in connections
            ),
        ),
        channels=_unique(
            doc.ChannelCounts.model_validate(_fields(r))
            for r in records
            if isinstance(r, ChannelCountsRecord)
        ),
    )


def _fields(record: TopoCommRecord | ChannelCountsRecord) -> dict[str, object]:
    """A record's own fields, without where it was read (``at``, ``origin``)."""
    return {k: v for k, v in asdict(record).items() if k not in ("at", "origin")}


def _versions(records: Sequence[NcclRecord]) -> list[doc.NcclVersion]:
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        if isinstance(r, NcclVersionRecord):
            seen[(r.nccl, r.cuda)].add(r.origin.process if r.origin else "")
    return [
        doc.NcclVersion(nccl=n, cuda=c, processes=sorted(p for p in procs if p))
        for (n, c), procs in sorted(seen.items())
    ]


@dataclass(slots=True)
class _Process:
    """One process's NCCL lines, gathered (:class:`doc.NcclProcess` once complete)."""

    host: str
    pid: int
    devices: set[int] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    bootstrap: str | None = None
    net: str | None = None
    net_devices: list[str] = field(default_factory=list)
    net_missing: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)


def _processes(records: Sequence[NcclRecord]) -> list[doc.NcclProcess]:
    table: dict[str, _Process] = {}
    for r in records:
        if r.origin is None:
            continue
        p = table.setdefault(r.origin.process, _Process(host=r.origin.host, pid=r.origin.pid))
        p.devices.add(r.origin.device)
        if isinstance(r, CommInitRecord | TopoCommRecord | InitTimingsRecord):
            p.ranks.add(r.rank)
        elif isinstance(r, BootstrapRecord):
            p.bootstrap = f"{r.interface}:{r.address}"
        elif isinstance(r, NetRecord):
            if r.state == "no_device":
                p.net_missing.append(r.net)
            else:
                p.net = r.net
                p.net_devices = list(r.devices) or p.net_devices
        elif isinstance(r, SettingRecord):
            p.settings[r.key] = r.value
    processes = [
        doc.NcclProcess(
            process=name,
            host=p.host,
            pid=p.pid,
            devices=sorted(p.devices),
            ranks=sorted(p.ranks),
            bootstrap=p.bootstrap,
            net=p.net,
            net_devices=p.net_devices,
            net_missing=p.net_missing,
            settings=p.settings,
        )
        for name, p in table.items()
    ]
    return sorted(processes, key=lambda p: (p.host, p.pid))


def _unique(items: Iterable[_C]) -> list[_C]:
    """The items in order, each distinct value once."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = repr(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def finding(f: Finding) -> doc.Finding:
    """One finding (severity, code, title, meaning, action, count, first, where)."""
    return doc.Finding(
        severity=f.severity,
        code=f.code,
        title=f.title,
        meaning=f.meaning,
        action=f.action,
        count=f.count,
        first=doc.LineRef(source=f.first.source, line=f.first.line),
        where=list(f.where),
    )


def nccl_tests_findings(tests: Sequence[NcclTestsResult]) -> list[doc.Finding]:
    """Rows whose ``#wrong``/``error`` column is not zero."""
    out = []
    for t in tests:
        bad = [
            r
            for r in t.rows
            if r.out_of_place.wrong not in ("0", "N/A")
            or (r.in_place and r.in_place.wrong not in ("0", "N/A"))
        ]
        if bad:
            out.append(
                doc.Finding(
                    severity="error",
                    code="nccl_tests_wrong_results",
                    title=f"nccl-tests found wrong results in {len(bad)} rows",
                    meaning="the collective returned wrong data: memory, NVLink or NIC fault",
                    action="rerun on subsets of nodes to isolate the GPU or link",
                    count=len(bad),
                    first=doc.LineRef(source=t.source, line=bad[0].at.line),
                    where=[],
                )
            )
    return out


def watchdog_event(e: WatchdogEvent) -> doc.WatchdogEvent:
    """One ProcessGroupNCCL line (every field of the event, the stack as a list)."""
    body = asdict(e)
    body["kind"] = e.kind.value
    body["stack"] = list(e.stack)
    body["queue_depth"] = e.queue_depth
    return doc.WatchdogEvent.model_validate(body)


def hang_section(report: HangReport) -> doc.HangSection:
    """The hang verdict (all fields of :class:`HangReport`, enums as strings)."""
    body = asdict(report)
    body["verdict"] = report.verdict.value
    for item in body["hung"]:
        item["evidence"] = str(item["evidence"])
        item["sizes_by_rank"] = [{"rank": r, "size": s} for r, s in item["sizes_by_rank"]]
    for item in body["queue_depths"]:
        item["evidence"] = str(item["evidence"])
    return doc.HangSection.model_validate(_lists(body))


def _lists(value: object) -> object:
    """``asdict``'s tuples as lists, at any depth (the strict contract takes lists only)."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


def _measure(m: NcclTestsMeasure | None) -> doc.NcclTestsMeasure | None:
    return doc.NcclTestsMeasure.model_validate(asdict(m)) if m is not None else None


def nccl_tests_result(t: NcclTestsResult) -> doc.NcclTestsRun:
    """One nccl-tests run: header, devices, rows, peak and average bus bandwidth."""
    rows = t.rows
    peak = max(rows, key=lambda r: r.out_of_place.busbw_bytes_per_second, default=None)
    return doc.NcclTestsRun(
        source=t.source,
        first_line=t.first_line,
        version=t.version,
        collective=t.collective,
        nthread=t.nthread,
        ngpus=t.ngpus,
        min_bytes=t.min_bytes,
        max_bytes=t.max_bytes,
        step=t.step,
        warmup_iters=t.warmup_iters,
        iters=t.iters,
        has_root=t.has_root,
        error_column=t.error_column,
        layout=t.layout,
        runs=t.runs,
        devices=[
            doc.NcclTestsDevice.model_validate({k: v for k, v in asdict(d).items() if k != "at"})
            for d in t.devices
        ],
        rows=[
            doc.NcclTestsRow(
                line=r.at.line,
                run=r.run,
                size_bytes=r.size_bytes,
                count=r.count,
                dtype=r.dtype,
                redop=r.redop,
                root=r.root,
                out_of_place=_measure(r.out_of_place),
                in_place=_measure(r.in_place),
            )
            for r in rows
        ],
        peak_busbw_bytes_per_second=peak.out_of_place.busbw_bytes_per_second if peak else None,
        peak_size_bytes=peak.size_bytes if peak else None,
        avg_busbw_bytes_per_second=t.avg_busbw_bytes_per_second,
        out_of_bounds=t.out_of_bounds,
    )


def stragglers(items: Sequence[StragglerExtreme | ThroughputRanking]) -> doc.Stragglers:
    """Megatron StragglerDetector min/max pairs and throughput rankings."""
    return doc.Stragglers(
        extremes=[
            doc.StragglerExtremeEntry(
                line=s.at.line,
                source=s.at.source,
                metric=s.metric,
                measures=METRICS[s.metric][0],
                which=s.which,
                value=s.value,
                unit=s.unit,
                rank=s.rank,
            )
            for s in items
            if isinstance(s, StragglerExtreme)
        ],
        rankings=[
            doc.ThroughputRankingEntry(
                line=s.at.line,
                source=s.at.source,
                side=s.side,
                ranks=[doc.RankFlops(rank=r, flops_per_second=v) for r, v in s.ranks],
            )
            for s in items
            if isinstance(s, ThroughputRanking)
        ],
    )
