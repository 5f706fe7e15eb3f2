"""The collector against real loopback endpoints, good and bad.

A twin dcgm endpoint, one that hangs, one that answers 500, one that serves garbage, one that
comes back after being down: the collector keeps running, stores what is good, records each
failed scrape, and records the outage as a gap when the target returns.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcscope.model.topology import load_topology
from hpcscope.service.collect.collector import Collector, CollectorConfig
from hpcscope.service.settings import bundled_topology
from hpcscope.store import Store
from hpcscope.twin import mapping
from hpcscope.twin.cluster import serve_routes
from hpcscope.twin.dcgm import DcgmEndpoint
from hpcscope.twin.workloads import Profile, shares_for

TOPOLOGY = load_topology(bundled_topology())


class Switch:
    """An endpoint whose behaviour the test changes while the collector runs."""

    def __init__(self, endpoint: DcgmEndpoint) -> None:
        self.endpoint = endpoint
        self.mode = "ok"

    def __call__(self) -> tuple[int, str, bytes]:
        if self.mode == "500":
            return 500, "text/plain", b"internal error\n"
        if self.mode == "hang":
            time.sleep(3)
        if self.mode == "garbage":
            return 200, "text/plain", b'<html>oops</html>\nDCGM_FI_DEV_GPU_UTIL{gpu="0" 12\n'
        return 200, "text/plain; version=0.0.4", self.endpoint.collect().encode()


@dataclass(frozen=True)
class Endpoints:
    """The switchable endpoints (a third, always good, is in the targets file too)."""

    flaky: Switch
    broken: Switch
    targets: Path

    def collector(self, store: Store, *, interval: float, timeout: float) -> Collector:
        return Collector(
            store,
            CollectorConfig(
                targets_path=self.targets,
                scrape_interval_seconds=interval,
                scrape_timeout_seconds=timeout,
            ),
        )


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[Endpoints]:
    node = TOPOLOGY.node("gpu01")
    mapping_dir = tmp_path / "mapping"
    for gpu in range(4):
        mapping.add_job(mapping_dir, str(gpu), "500")
    memory = node.gpus[0].model.memory_bytes
    healthy = shares_for(Profile.HEALTHY, gpu_index=0, straggler_gpu=None, memory_bytes=memory)
    endpoint = DcgmEndpoint(
        "gpu01", node.gpus, mapping_dir, shares=lambda i: healthy if i < 4 else None
    )
    switches = {name: Switch(endpoint) for name in ("good", "flaky", "broken")}
    servers = []
    targets = []
    for name, switch in switches.items():
        server, _ = serve_routes("127.0.0.1", 0, {"/metrics": switch})
        servers.append(server)
        targets.append(
            {
                "targets": [f"127.0.0.1:{server.server_address[1]}"],
                "labels": {"exporter": "dcgm", "node": f"node-{name}"},
            }
        )
    targets_file = tmp_path / "targets.json"
    targets_file.write_text(json.dumps(targets))
    yield Endpoints(switches["flaky"], switches["broken"], targets_file)
    for server in servers:
        server.shutdown()
        server.server_close()


def test_bad_targets_cost_a_failed_scrape_and_a_gap_not_data(
    tmp_path: Path, endpoints: Endpoints
) -> None:
    store = Store(tmp_path / "store.duckdb")
    collector = endpoints.collector(store, interval=1, timeout=1)
    flaky, broken = endpoints.flaky, endpoints.broken
    # (broken mode, flaky mode) per cycle: flaky fails twice then comes back
    plan = [("ok", "ok"), ("garbage", "500"), ("garbage", "hang"), ("500", "ok")]

    async def run() -> list[int]:
        counts = []
        try:
            for broken_mode, flaky_mode in plan:
                broken.mode, flaky.mode = broken_mode, flaky_mode
                await collector.collect_once()
                store.flush()
                counts.append(
                    store.query("SELECT count(*) AS n FROM gpu_samples").to_pylist()[0]["n"]
                )
        finally:
            await collector.aclose()
        return counts

    counts = asyncio.run(run())
    assert counts[0] == 3 * 8  # three nodes' pages, 8 GPUs each (4 attributed to job 500)
    assert counts == sorted(counts)  # nothing stored is ever lost
    assert counts[1] == counts[0] + 8  # only the good target while the others fail
    assert counts[3] == counts[2] + 2 * 8  # flaky is back
    scrapes = store.query("SELECT target, ok, error FROM scrapes ORDER BY ts, target").to_pylist()
    failures = [s for s in scrapes if not s["ok"]]
    errors = " | ".join(str(s["error"]) for s in failures)
    assert "500" in errors
    assert "line" in errors  # the garbage page's error names the line
    assert "timed out" in errors.lower() or "timeout" in errors.lower()
    gaps = store.query("SELECT target, start_ts, end_ts, reason FROM collection_gaps").to_pylist()
    assert len(gaps) == 1
    assert gaps[0]["start_ts"] < gaps[0]["end_ts"]
    assert "500" in gaps[0]["reason"]
    collector.close_open_gaps()  # broken is still failing at shutdown
    store.flush()
    assert store.query("SELECT count(*) AS n FROM collection_gaps").to_pylist()[0]["n"] == 2
    store.close()


def test_collector_thread_survives_and_stops(tmp_path: Path, endpoints: Endpoints) -> None:
    store = Store(tmp_path / "store.duckdb")
    collector = endpoints.collector(store, interval=0.3, timeout=0.5)
    broken = endpoints.broken
    broken.mode = "hang"
    collector.start()
    deadline = time.monotonic() + 10
    while collector.cycles < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    collector.stop()
    assert collector.cycles >= 3
    assert not any(t.name == "hpcscope-collector" and t.is_alive() for t in threading.enumerate())
    store.flush()
    assert store.query("SELECT count(*) AS n FROM scrapes WHERE NOT ok").to_pylist()[0]["n"] >= 3
    store.close()
