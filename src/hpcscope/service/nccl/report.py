"""Sections of the ``hpcscope nccl analyze --json`` document (contract: ``docs/nccl.md``).

Every function turns parsed records or analysis results into JSON-ready dicts; keys are
stable, units are in the key names (``_seconds``, ``_bytes_per_second``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

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


def log_input(log: NcclLogParse) -> dict[str, Any]:
    """One text input: line counts, record counts, unknown samples, warnings."""
    kinds: Counter[str] = Counter(type(r).__name__.removesuffix("Record") for r in log.nccl)
    kinds.update(f"watchdog.{e.kind.value}" for e in log.watchdog)
    kinds["nccl_tests.rows"] = sum(len(t.rows) for t in log.nccl_tests)
    kinds["megatron"] = len(log.stragglers)
    return {
        "path": log.source,
        "kind": "log",
        "lines": log.lines,
        "parsed_lines": log.parsed_lines,
        "blank_lines": log.blank_lines,
        "unknown_lines": log.unknown_lines,
        "unknown_samples": [{"line": n, "text": t} for n, t in log.unknown_samples],
        "records": {k: v for k, v in sorted(kinds.items()) if v},
        "warnings": [w.to_dict() for w in log.warnings],
    }


def dump_input(dump: FlightRecorderDump) -> dict[str, Any]:
    """One flight-recorder dump: rank, versions, sizes, warnings."""
    return {
        "path": dump.source,
        "kind": "flight_recorder",
        "rank": dump.rank,
        "version": dump.version,
        "nccl_version": dump.nccl_version,
        "process_groups": len(dump.pg_configs),
        "entries": len(dump.entries),
        "states": dict(Counter(e.state for e in dump.entries)),
        "warnings": [{"message": w, "source": dump.source} for w in dump.warnings],
    }


def nccl_section(records: Sequence[NcclRecord]) -> dict[str, Any]:
    """Versions, processes and their transport, init, topology, rings, trees, connections."""
    processes = _processes(records)
    inits: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for r in records:
        if isinstance(r, CommInitRecord):
            inits[r.nranks][r.state.lower()].add(r.rank)
    connections = [r for r in records if isinstance(r, ConnectionRecord)]
    return {
        "versions": _versions(records),
        "processes": processes,
        "transport_by_rank": sorted(
            (
                {"rank": rank, "process": p["process"], "net": p["net"]}
                for p in processes
                if p["net"]
                for rank in p["ranks"]
            ),
            key=lambda x: x["rank"],
        ),
        "init": [
            {
                "nranks": n,
                "ranks_started": sorted(states.get("start", set())),
                "ranks_completed": sorted(states.get("complete", set())),
                "ranks_started_not_completed": sorted(
                    states.get("start", set()) - states.get("complete", set())
                ),
            }
            for n, states in sorted(inits.items())
        ],
        "init_timings": [
            {"rank": r.rank, "nranks": r.nranks, "total_seconds": r.total_seconds}
            | {"parts_seconds": r.parts_seconds}
            for r in records
            if isinstance(r, InitTimingsRecord)
        ],
        "topology": {
            "comms": _unique(
                {k: v for k, v in asdict(r).items() if k not in ("at", "origin")}
                for r in records
                if isinstance(r, TopoCommRecord)
            ),
            "system": [
                {
                    "max_bw_bytes_per_second": r.max_bw_bytes_per_second,
                    "total_bw_bytes_per_second": r.total_bw_bytes_per_second,
                    "process": r.origin.process if r.origin else None,
                }
                for r in records
                if isinstance(r, TopoSystemRecord)
            ],
        },
        "rings": _unique(
            {"channel": r.channel, "nchannels": r.nchannels, "order": list(r.order)}
            for r in records
            if isinstance(r, RingRecord)
        ),
        "trees": _unique(
            {"channel": r.channel, "rank": r.rank, "parent": r.parent, "children": list(r.children)}
            for r in records
            if isinstance(r, TreeRecord)
        ),
        "connections": {
            "count": len(connections),
            "by_transport": dict(Counter(c.transport for c in connections)),
            "by_via": dict(Counter(c.via for c in connections)),
            "items": _unique(
                {
                    "channel": c.channel,
                    "src_rank": c.src_rank,
                    "dst_rank": c.dst_rank,
                    "direction": c.direction,
                    "via": c.via,
                }
                for c in connections
            ),
        },
        "channels": _unique(
            {k: v for k, v in asdict(r).items() if k not in ("at", "origin")}
            for r in records
            if isinstance(r, ChannelCountsRecord)
        ),
    }


def _versions(records: Sequence[NcclRecord]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        if isinstance(r, NcclVersionRecord):
            seen[(r.nccl, r.cuda)].add(r.origin.process if r.origin else "")
    return [
        {"nccl": n, "cuda": c, "processes": sorted(p for p in procs if p)}
        for (n, c), procs in sorted(seen.items())
    ]


def _processes(records: Sequence[NcclRecord]) -> list[dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.origin is None:
            continue
        p = table.setdefault(
            r.origin.process,
            {
                "process": r.origin.process,
                "host": r.origin.host,
                "pid": r.origin.pid,
                "devices": set(),
                "ranks": set(),
                "bootstrap": None,
                "net": None,
                "net_devices": [],
                "net_missing": [],
                "settings": {},
            },
        )
        p["devices"].add(r.origin.device)
        if isinstance(r, CommInitRecord | TopoCommRecord | InitTimingsRecord):
            p["ranks"].add(r.rank)
        elif isinstance(r, BootstrapRecord):
            p["bootstrap"] = f"{r.interface}:{r.address}"
        elif isinstance(r, NetRecord):
            if r.state == "no_device":
                p["net_missing"].append(r.net)
            else:
                p["net"] = r.net
                p["net_devices"] = list(r.devices) or p["net_devices"]
        elif isinstance(r, SettingRecord):
            p["settings"][r.key] = r.value
    for p in table.values():
        p["devices"], p["ranks"] = sorted(p["devices"]), sorted(p["ranks"])
    return sorted(table.values(), key=lambda p: (p["host"], p["pid"]))


def _unique(items: Any) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = repr(sorted(item.items()))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def finding(f: Finding) -> dict[str, Any]:
    """One finding (severity, code, title, meaning, action, count, first, where)."""
    return {
        "severity": f.severity,
        "code": f.code,
        "title": f.title,
        "meaning": f.meaning,
        "action": f.action,
        "count": f.count,
        "first": {"source": f.first.source, "line": f.first.line},
        "where": list(f.where),
    }


def nccl_tests_findings(tests: Sequence[NcclTestsResult]) -> list[dict[str, Any]]:
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
                {
                    "severity": "error",
                    "code": "nccl_tests_wrong_results",
                    "title": f"nccl-tests found wrong results in {len(bad)} rows",
                    "meaning": "the collective returned wrong data: memory, NVLink or NIC fault",
                    "action": "rerun on subsets of nodes to isolate the GPU or link",
                    "count": len(bad),
                    "first": {"source": t.source, "line": bad[0].at.line},
                    "where": [],
                }
            )
    return out


def watchdog_event(e: WatchdogEvent) -> dict[str, Any]:
    """One ProcessGroupNCCL line (every field of the event, the stack as a list)."""
    body = asdict(e)
    body["kind"] = e.kind.value
    body["stack"] = list(e.stack)
    body["queue_depth"] = e.queue_depth
    return body


def hang_section(report: HangReport) -> dict[str, Any]:
    """The hang verdict (all fields of :class:`HangReport`, enums as strings)."""
    body = asdict(report)
    body["verdict"] = report.verdict.value
    for item in body["hung"]:
        item["evidence"] = str(item["evidence"])
        item["sizes_by_rank"] = [{"rank": r, "size": s} for r, s in item["sizes_by_rank"]]
    for item in body["queue_depths"]:
        item["evidence"] = str(item["evidence"])
    lists: dict[str, Any] = _lists(body)
    return lists


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


def _measure(m: NcclTestsMeasure | None) -> dict[str, Any] | None:
    return asdict(m) if m is not None else None


def nccl_tests_result(t: NcclTestsResult) -> dict[str, Any]:
    """One nccl-tests run: header, devices, rows, peak and average bus bandwidth."""
    rows = t.rows
    peak = max(rows, key=lambda r: r.out_of_place.busbw_bytes_per_second, default=None)
    return {
        "source": t.source,
        "first_line": t.first_line,
        "version": t.version,
        "collective": t.collective,
        "nthread": t.nthread,
        "ngpus": t.ngpus,
        "min_bytes": t.min_bytes,
        "max_bytes": t.max_bytes,
        "step": t.step,
        "warmup_iters": t.warmup_iters,
        "iters": t.iters,
        "has_root": t.has_root,
        "error_column": t.error_column,
        "layout": t.layout,
        "runs": t.runs,
        "devices": [{k: v for k, v in asdict(d).items() if k != "at"} for d in t.devices],
        "rows": [
            {
                "line": r.at.line,
                "run": r.run,
                "size_bytes": r.size_bytes,
                "count": r.count,
                "dtype": r.dtype,
                "redop": r.redop,
                "root": r.root,
                "out_of_place": _measure(r.out_of_place),
                "in_place": _measure(r.in_place),
            }
            for r in rows
        ],
        "peak_busbw_bytes_per_second": peak.out_of_place.busbw_bytes_per_second if peak else None,
        "peak_size_bytes": peak.size_bytes if peak else None,
        "avg_busbw_bytes_per_second": t.avg_busbw_bytes_per_second,
        "out_of_bounds": t.out_of_bounds,
    }


def stragglers(items: Sequence[StragglerExtreme | ThroughputRanking]) -> dict[str, Any]:
    """Megatron StragglerDetector min/max pairs and throughput rankings."""
    return {
        "extremes": [
            {
                "line": s.at.line,
                "source": s.at.source,
                "metric": s.metric,
                "measures": METRICS[s.metric][0],
                "which": s.which,
                "value": s.value,
                "unit": s.unit,
                "rank": s.rank,
            }
            for s in items
            if isinstance(s, StragglerExtreme)
        ],
        "rankings": [
            {
                "line": s.at.line,
                "source": s.at.source,
                "side": s.side,
                "ranks": [{"rank": r, "flops_per_second": v} for r, v in s.ranks],
            }
            for s in items
            if isinstance(s, ThroughputRanking)
        ],
    }
