"""The integrity spool reader on fabricated records: incremental reads of complete lines, bad
lines named, attribution against the platform's allocations, and the collector's wiring."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import AlertState, Severity
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.collect.collector import CycleReport
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import IntegritySection
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store
from hpcscope.store.alerts import alerts
from tests.support.collect import collector_for
from tests.support.integrity_records import gradients, lines_by_rank, step_lines

WORLD = 4
ADMIN_SCOPE = JobScope(all_jobs=True)


def _platform(store: Store, job: str = "4242", user: str = "bob") -> None:
    row = {"job_id": job, "user": user, "account": "nlp", "source": "test"}
    store.upsert_jobs(pa.Table.from_pylist([row], schema=JOB_SCHEMA)).result()
    allocations = [
        {"job_id": job, "node": f"node{n}", "gpu": g, "gpu_instance_id": None,
         "start_time": datetime(2025, 1, 1), "end_time": None}
        for n in (0, 1) for g in (0, 1)
    ]  # fmt: skip
    table = pa.Table.from_pylist(allocations, schema=JOB_ALLOCATION_SCHEMA)
    slurm_store.merge_allocations(store, table).result()


def _liar_spool(root: Path, steps: int, *, job: str = "4242") -> dict[int, list[str]]:
    per_step = []
    for step in range(steps):
        grads = gradients(WORLD, seed=step)
        lie = {2: -grads[2]} if step >= 1 else None
        per_step.append(step_lines(grads, step=step, lie=lie, job_id=job))
    files = lines_by_rank(per_step)
    (root / job).mkdir(parents=True, exist_ok=True)
    return files


def test_complete_lines_only_and_each_line_once(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    files = _liar_spool(root, 3)
    with Store(tmp_path / "s.duckdb") as store:
        _platform(store)
        spool = IntegritySpool(store, root, load_site_rules(None))
        for rank, lines in files.items():  # steps 0 and 1 whole, step 2 half written
            text = "\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2]
            (root / "4242" / f"rank-{rank}.jsonl").write_text(text)
        first = spool.collect_once()
        assert (first.records, first.errors) == (2 * WORLD, [])
        [gi3] = alerts(store, ADMIN_SCOPE)
        assert (gi3.rule_id, gi3.step, gi3.count, gi3.severity) == ("GI-3", 1, 1, Severity.CRITICAL)
        assert gi3.subject == "rank 2 (suspected)" and (gi3.node, gi3.gpu) == ("node1", 0)
        assert (gi3.user, gi3.account, gi3.state) == ("bob", "nlp", AlertState.OPEN)
        for rank, lines in files.items():
            (root / "4242" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
        second = spool.collect_once()
        assert second.records == WORLD  # only the completed step-2 lines
        [gi3] = alerts(store, ADMIN_SCOPE)
        assert (gi3.step, gi3.count) == (2, 2)
        assert gi3.evidence[1].position == "line 3"  # the record of step 2 in rank-2.jsonl


def test_a_bad_line_is_named_and_the_others_are_used(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    files = _liar_spool(root, 2)
    for rank, lines in files.items():
        bad = lines[:1] + (['{"format": "hpcscope-integrity/1", "rank": 1}'] if rank == 1 else [])
        (root / "4242" / f"rank-{rank}.jsonl").write_text("\n".join(bad + lines[1:]) + "\n")
    with Store(tmp_path / "s.duckdb") as store:
        _platform(store)
        cycle = IntegritySpool(store, root, load_site_rules(None)).collect_once()
        path = root / "4242" / "rank-1.jsonl"
        assert len(cycle.errors) == 1 and cycle.errors[0].startswith(f"{path}:2: sketch_dim:")
        assert cycle.steps_evaluated == 2


def test_a_claim_the_platform_does_not_confirm_raises_gi_attr(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    grads = gradients(WORLD, seed=0)
    (root / "9999").mkdir(parents=True)
    for rank, line in enumerate(step_lines(grads, step=0, job_id="9999")):
        (root / "9999" / f"rank-{rank}.jsonl").write_text(line + "\n")
    with Store(tmp_path / "s.duckdb") as store:
        _platform(store, job="4242", user="bob")  # the GPUs belong to 4242, not 9999
        IntegritySpool(store, root, load_site_rules(None)).collect_once()
        found = alerts(store, ADMIN_SCOPE)
        assert {(a.rule_id, a.job_id) for a in found} == {("GI-ATTR", "4242")}
        assert len(found) == WORLD and all(
            "claims job 9999" in a.evidence[0].summary for a in found
        )


def test_the_collector_reads_the_spool_each_cycle(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    files = _liar_spool(root, 2)
    for rank, lines in files.items():
        (root / "4242" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    settings = Settings(
        store_path=tmp_path / "s.duckdb", integrity=IntegritySection(spool_dir=root)
    )
    with Store(settings.store_path) as store:
        _platform(store)
        collector = collector_for(store, settings, rules=load_site_rules(None))
        (source,) = collector.sources
        assert source.name == "integrity"

        async def once() -> CycleReport:
            try:
                return await collector.collect_once()
            finally:
                await collector.aclose()

        report = asyncio.run(once())
        assert (report.of("integrity").alerts, report.errors) == (1, [])
        assert [a.rule_id for a in alerts(store, ADMIN_SCOPE)] == ["GI-3"]
