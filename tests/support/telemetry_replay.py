"""Replay a twin telemetry scenario through the production pipeline into a store.

Each of the scenario's scrapes is parsed as the collector parses it (the exposition parser,
then ``infiniband_rows`` or the dcgm converter), its job_stats snapshots by
``parse_job_stats``, its changelog and NVML process lists written to the spools and read by
:class:`~hpcscope.service.telemetry_rules.spool.ChangelogSpool` and
:class:`~hpcscope.service.telemetry_rules.spool.ProcessSpool`, its Slurm jobs and allocations
stored as the Slurm sources store them; then :class:`TelemetryRules` runs once at the
scenario's evaluation time with the site's rules plus the scenario's lists.
``bench/detection_quality.py`` and the integration tests use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.analysis.telemetry_rules.rules import evaluate
from hpcscope.ingest.exporters.dcgm import DcgmConverter
from hpcscope.ingest.exporters.infiniband import infiniband_rows
from hpcscope.ingest.exporters.lustre_jobstats import parse_job_stats
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.service.collect.node_facts import store_page_facts
from hpcscope.service.telemetry_rules.engine import TelemetryCycle, TelemetryRules
from hpcscope.service.telemetry_rules.spool import ChangelogSpool, ProcessSpool
from hpcscope.store import Store
from hpcscope.store.infiniband import append_ib_counters
from hpcscope.store.lustre import append_job_stats
from hpcscope.store.slurm import merge_allocations
from hpcscope.twin.attacks import JOBS, Scenario
from hpcscope.twin.telemetry_traces import SECOND_NS, gpus, hcas


def with_lists(
    rules: Mapping[str, RuleSpec], lists: Mapping[str, Mapping[str, list[str]]]
) -> dict[str, RuleSpec]:
    """The rules with some lists replaced (a site's own datasets, maintenance windows)."""
    out = dict(rules)
    for rule_id, items in lists.items():
        spec = out[rule_id]
        merged = dict(spec.lists) | {k: tuple(v) for k, v in items.items()}
        out[rule_id] = replace(spec, lists=merged)
    return out


def port_gpus(s: Scenario) -> dict[tuple[str, str, int], int]:
    """The HCA -> GPU map of the scenario's nodes (the twin's rail-optimised nodes)."""
    nodes = {node for _, _, node, _ in s.pages} | {node for node, _ in s.compute_apps}
    return {
        (h.node, h.device, h.port): h.gpu_index
        for node in sorted(nodes)
        for h in hcas(node)
        if h.gpu_index is not None
    }


def load_scenario(store: Store, s: Scenario, spool: Path) -> None:
    """Store the scenario's jobs, scrapes and job_stats; write its changelog and process lists
    to the spools under ``spool`` (read by :func:`replay`)."""
    jobs: dict[str, dict[str, object]] = {
        job: {"job_id": job, "user": u, "account": a, "source": "twin"}
        for job, (u, a) in JOBS.items()
    }
    for row in s.slurm_jobs:
        jobs[str(row["job_id"])] = dict(row)
    rows = [dict.fromkeys(JOB_SCHEMA.names) | r for r in jobs.values()]
    store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()
    if s.allocations:
        table = pa.Table.from_pylist(s.allocations, schema=JOB_ALLOCATION_SCHEMA)
        merge_allocations(store, table).result()
    parser = ExpositionParser()
    converters: dict[str, DcgmConverter] = {}
    for ts_ns, exporter, node, text in s.pages:
        ts = from_epoch_seconds(ts_ns / SECOND_NS)
        page = parser.parse(text, source=f"http://{node}/metrics")
        store_page_facts(store, "dcgm" if exporter == "dcgm" else "node", page, ts=ts, node=node)
        if exporter == "infiniband":
            append_ib_counters(store, infiniband_rows(page, ts=ts, node=node).table)
        elif exporter == "dcgm":
            conversion = converters.setdefault(node, DcgmConverter()).convert(
                page, ts=ts, node=node
            )
            store.append("gpu_samples", conversion.table)
    for server, text in s.job_stats:
        append_job_stats(store, parse_job_stats(text, source=f"{server}.job_stats", server=server))
    changelog = spool / "changelog"
    changelog.mkdir(parents=True, exist_ok=True)
    for mdt, text in s.changelog:
        with (changelog / f"{mdt}.changelog").open("a", encoding="utf-8") as handle:
            handle.write(text)
    store.flush()


def replay(s: Scenario, root: Path, rules: Mapping[str, RuleSpec]) -> tuple[Store, TelemetryCycle]:
    """The scenario through parsers, spools, store and rules (module docstring). The caller
    closes the returned store."""
    store = Store(root / "store.duckdb")
    spool = root / "spool"
    load_scenario(store, s, spool)
    ChangelogSpool(store, spool / "changelog", resolve=s.fids.get).collect_once()
    processes = ProcessSpool(store, spool / "gpu-processes")
    nodes = {node for node, _ in s.compute_apps}
    for node in nodes:
        node_dir = spool / "gpu-processes" / node
        s.proc.write(node_dir / "proc")
        index = "".join(f"{g.index}, {g.uuid}\n" for g in gpus(node))
        (node_dir / "gpus.csv").write_text("index, uuid\n" + index, encoding="utf-8")
    for node, text in s.compute_apps:  # each read as the node's timer rewrites the file
        (spool / "gpu-processes" / node / "compute-apps.csv").write_text(text, encoding="utf-8")
        processes.collect_once()
    store.flush()
    engine = TelemetryRules(store, with_lists(rules, s.rule_lists), port_gpus=port_gpus(s))
    at = None if s.evaluate_at_ns is None else from_epoch_seconds(s.evaluate_at_ns / SECOND_NS)
    return store, engine.evaluate_once(now=at)


def detection_delays(
    store: Store,
    s: Scenario,
    rules: Mapping[str, RuleSpec],
    *,
    step_seconds: float = 15.0,
    max_seconds: float = 600.0,
) -> dict[str, float | None]:
    """Seconds from the scenario's onset to the first run (one every ``step_seconds``, as
    after each collector cycle) whose alerts include each expected rule; None when not within
    ``max_seconds``. Runs read only what the store held by then, and write nothing."""
    if s.onset_ns is None:
        return {}
    engine = TelemetryRules(store, with_lists(rules, s.rule_lists), port_gpus=port_gpus(s))
    onset = from_epoch_seconds(s.onset_ns / SECOND_NS)
    pending = set(s.expected)
    delays: dict[str, float | None] = {}
    waited = 0.0
    while pending and waited <= max_seconds:
        found = {a.rule_id for a in evaluate(engine.read(onset + timedelta(seconds=waited)),
                                             engine.rules)}  # fmt: skip
        for rule in pending & found:
            delays[rule] = waited
        pending -= found
        waited += step_seconds
    return delays | dict.fromkeys(pending)
