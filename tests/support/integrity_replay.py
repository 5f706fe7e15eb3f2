"""Replay a twin training-side scenario (``twin/attacks_training.py``) through the production
pipeline: its Slurm jobs and allocations stored as the Slurm sources store them, its Lustre
changelog parsed by ``parse_changelog`` into ``lustre_changelog``, its recorder lines written
to ``<root>/integrity/<job>/training-<rank>.jsonl``, then one :class:`IntegritySpool` pass
with the site's rules. ``bench/detection_quality.py`` and the tests use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.lustre_changelog import parse_changelog
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from hpcscope.service.integrity.spool import IntegritySpool, SpoolCycle
from hpcscope.store import Store
from hpcscope.store.slurm import merge_allocations
from hpcscope.store.telemetry_rules import append_changelog
from hpcscope.twin.attacks import JOBS, Scenario


def replay_training(
    s: Scenario, root: Path, rules: Mapping[str, RuleSpec]
) -> tuple[Store, SpoolCycle]:
    """The scenario through store, changelog parser, spool files and the integrity spool; the
    caller closes the returned store."""
    store = Store(root / "store.duckdb")
    jobs: dict[str, dict[str, object]] = {
        job: {"job_id": job, "user": u, "account": a, "source": "twin"}
        for job, (u, a) in JOBS.items()
    }
    for row in s.slurm_jobs:
        jobs[str(row["job_id"])] = dict(row)
    rows = [dict.fromkeys(JOB_SCHEMA.names) | r for r in jobs.values()]
    store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()
    if s.allocations:
        merge_allocations(store, pa.Table.from_pylist(s.allocations, schema=JOB_ALLOCATION_SCHEMA))
    for mdt, text in s.changelog:
        parsed = parse_changelog(text, mdt=mdt, source=f"{mdt}.changelog", resolve=s.fids.get)
        append_changelog(store, parsed.table).result()
    spool = root / "integrity"
    for job, rank, text in s.training_events:
        (spool / job).mkdir(parents=True, exist_ok=True)
        (spool / job / f"training-{rank}.jsonl").write_text(text, encoding="utf-8")
    store.flush()
    cycle = IntegritySpool(store, spool, rules).collect_once()
    store.flush()
    return store, cycle
