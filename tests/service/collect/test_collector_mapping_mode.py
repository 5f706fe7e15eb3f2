"""The collector in mapping-directory mode: the same hpc-job-mapping files feed the dcgm
endpoint (as dcgm-exporter --hpc-job-mapping-dir) and hpcscope's allocations; samples are
attributed from the allocations, and nothing is attributed once the epilog has run.

The cycles run in simulated time (:class:`~tests.support.clock.FakeClock`, which also dates the
allocations), the endpoint's real pages behind an ``httpx2.MockTransport``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC
from pathlib import Path

import httpx2

from hpcscope.model.topology import load_topology
from hpcscope.service.collect.attribution import attributed_samples
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import DcgmSection, JobMappingSection, NodeSection
from hpcscope.store import Store
from hpcscope.twin import mapping
from hpcscope.twin.dcgm import DcgmEndpoint
from tests.support.clock import FakeClock
from tests.support.collect import collector_for

TOPOLOGY = load_topology(bundled_topology())


def test_mapping_mode_attributes_from_the_shared_files(tmp_path: Path) -> None:
    clock = FakeClock()

    def epoch_seconds() -> float:
        return clock.now().replace(tzinfo=UTC).timestamp()

    node = TOPOLOGY.node("gpu01")
    root = tmp_path / "nodes"
    mapping_dir = root / "gpu01" / "hpc-job-mapping"  # the twin's layout
    records = tmp_path / "records"
    records.mkdir()
    for gpu in (0, 1):
        mapping.add_job(mapping_dir, str(gpu), "500")
    record = {
        "format": "hpcscope-job-record/1", "job_id": "500", "raw_job_id": "500", "label": "500",
        "node": "gpu01", "user": "alice", "account": "team-a", "partition": "gpu",
        "gpus": ["0", "1"], "start_time": epoch_seconds() - 5, "end_time": None,
    }  # fmt: skip
    (records / "500.json").write_text(json.dumps(record))
    endpoint = DcgmEndpoint("gpu01", node.gpus, mapping_dir, shares=lambda i: None)

    def page(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/metrics"
        return httpx2.Response(
            200, headers={"Content-Type": "text/plain"}, content=endpoint.collect().encode()
        )

    targets = tmp_path / "targets.json"
    targets.write_text(
        json.dumps([{"targets": ["gpu01:9400"], "labels": {"exporter": "dcgm", "node": "gpu01"}}])
    )
    store = Store(tmp_path / "store.duckdb")
    collector = collector_for(
        store,
        Settings(
            dcgm=DcgmSection(targets_path=targets),
            node=NodeSection(targets_path=targets),
            job_mapping=JobMappingSection(dir=root, records_dir=records),
        ),
        clock=clock,
        transport=httpx2.MockTransport(page),
    )

    async def cycle() -> None:
        await collector.collect_once()
        store.flush()

    async def run() -> None:
        try:
            await cycle()
            # the epilog: line removed, record ended
            for gpu in (0, 1):
                mapping.remove_job(mapping_dir, str(gpu), "500")
            record["end_time"] = epoch_seconds()
            (records / "500.json").write_text(json.dumps(record))
            await clock.sleep(15)
            await cycle()
        finally:
            await collector.aclose()

    try:
        asyncio.run(run())
        rows = attributed_samples(store).to_pylist()
    finally:
        store.close()
    first, second = rows[: len(rows) // 2], rows[len(rows) // 2 :]
    assert {(r["gpu"], r["job_id"], r["user"], r["account"]) for r in first} == {
        (0, "500", "alice", "team-a"),
        (1, "500", "alice", "team-a"),
        *{(gpu, None, None, None) for gpu in range(2, 8)},
    }
    assert {r["job_id"] for r in second} == {None}
    assert len(first) == len(second) == 8
