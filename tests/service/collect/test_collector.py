"""The collector against good and bad exporters, in simulated time and on real loopback.

A twin dcgm endpoint, one that hangs, one that answers 500, one that serves garbage, one that
comes back after being down: the collector keeps running, stores what is good, records each
failed scrape, and records the outage as a gap when the target returns. Cycles run on a
:class:`~tests.support.clock.FakeClock` with the exporters behind an ``httpx2.MockTransport``
(the twin's real pages); one test runs the real collector thread against real loopback servers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx2
import pytest

from hpcscope.ingest.slurm import SchedulerSnapshot, parse_slurmrestd_jobs
from hpcscope.model.topology import load_topology
from hpcscope.service.collect.collector import Collector, CollectorConfig
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import DcgmSection, NodeSection
from hpcscope.service.sources.slurm import SlurmPoll
from hpcscope.store import Store
from hpcscope.twin import mapping
from hpcscope.twin.cluster import serve_routes
from hpcscope.twin.dcgm import DcgmEndpoint
from hpcscope.twin.workloads import Profile, shares_for
from tests.support.clock import EPOCH, FakeClock
from tests.support.collect import collector_for
from tests.support.paths import FIXTURES

TOPOLOGY = load_topology(bundled_topology())
NAMES = ("good", "flaky", "broken")
Answer = tuple[int, str, bytes]


class Switch:
    """An endpoint whose behaviour the test changes while the collector runs."""

    def __init__(self, endpoint: DcgmEndpoint, released: threading.Event) -> None:
        self.endpoint = endpoint
        self.released = released
        self.mode = "ok"

    def answer(self) -> Answer | None:
        """The answer of the current mode; None while it hangs."""
        if self.mode == "500":
            return 500, "text/plain", b"internal error\n"
        if self.mode == "hang":
            return None
        if self.mode == "garbage":
            return 200, "text/plain", b'<html>oops</html>\nDCGM_FI_DEV_GPU_UTIL{gpu="0" 12\n'
        return 200, "text/plain; version=0.0.4", self.endpoint.collect().encode()

    def __call__(self) -> Answer:
        """The loopback server's route: a hang holds the request until the test ends."""
        answer = self.answer()
        if answer is None:
            self.released.wait(timeout=10)
            return 503, "text/plain", b"released\n"
        return answer


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set at teardown: hanging loopback requests end then, not after a fixed sleep."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def switches(tmp_path: Path, released: threading.Event) -> dict[str, Switch]:
    node = TOPOLOGY.node("gpu01")
    mapping_dir = tmp_path / "mapping"
    for gpu in range(4):
        mapping.add_job(mapping_dir, str(gpu), "500")
    memory = node.gpus[0].model.memory_bytes
    healthy = shares_for(Profile.HEALTHY, gpu_index=0, straggler_gpu=None, memory_bytes=memory)
    endpoint = DcgmEndpoint(
        "gpu01", node.gpus, mapping_dir, shares=lambda i: healthy if i < 4 else None
    )
    return {name: Switch(endpoint, released) for name in NAMES}


def _targets_file(path: Path, hosts: dict[str, str]) -> Path:
    groups = [
        {"targets": [host], "labels": {"exporter": "dcgm", "node": f"node-{name}"}}
        for name, host in hosts.items()
    ]
    path.write_text(json.dumps(groups))
    return path


def _transport(switches: dict[str, Switch]) -> httpx2.MockTransport:
    """The switches behind a mock transport, by host name (``node-good``...)."""

    async def handle(request: httpx2.Request) -> httpx2.Response:
        switch = switches[request.url.host.removeprefix("node-")]
        answer = switch.answer()
        if answer is None:
            await asyncio.Event().wait()  # hangs until the scraper's timeout cancels it
            raise AssertionError("unreachable")
        status, content_type, body = answer
        return httpx2.Response(status, headers={"Content-Type": content_type}, content=body)

    return httpx2.MockTransport(handle)


def _simulated(
    tmp_path: Path, store: Store, switches: dict[str, Switch], clock: FakeClock
) -> Collector:
    targets = _targets_file(
        tmp_path / "targets.json", {name: f"node-{name}:9400" for name in switches}
    )
    settings = Settings(
        scrape_interval_seconds=15,
        scrape_timeout_seconds=0.2,
        dcgm=DcgmSection(targets_path=targets),
        node=NodeSection(targets_path=targets),
    )
    return collector_for(store, settings, clock=clock, transport=_transport(switches))


def _count(store: Store, sql: str) -> int:
    rows: list[dict[str, int]] = store.query(sql).to_pylist()
    return rows[0]["n"]


def test_bad_targets_cost_a_failed_scrape_and_a_gap_not_data(
    tmp_path: Path, switches: dict[str, Switch]
) -> None:
    store = Store(tmp_path / "store.duckdb")
    clock = FakeClock()
    collector = _simulated(tmp_path, store, switches, clock)
    flaky, broken = switches["flaky"], switches["broken"]
    # (broken mode, flaky mode) per cycle, 15 simulated seconds apart: flaky fails twice then
    # comes back
    plan = [("ok", "ok"), ("garbage", "500"), ("garbage", "hang"), ("500", "ok")]

    async def run() -> list[int]:
        counts = []
        try:
            for broken_mode, flaky_mode in plan:
                broken.mode, flaky.mode = broken_mode, flaky_mode
                await collector.collect_once()
                store.flush()
                counts.append(_count(store, "SELECT count(*) AS n FROM gpu_samples"))
                await clock.sleep(15)
        finally:
            await collector.aclose()
        return counts

    counts = asyncio.run(run())
    assert counts[0] == 3 * 8  # three nodes' pages, 8 GPUs each (4 attributed to job 500)
    assert counts == sorted(counts)  # nothing stored is ever lost
    assert counts[1] == counts[0] + 8  # only the good target while the others fail
    assert counts[3] == counts[2] + 2 * 8  # flaky is back
    scrapes = store.query("SELECT ts, target, ok, error FROM scrapes ORDER BY ts, target")
    rows = scrapes.to_pylist()
    assert sorted({row["ts"] for row in rows}) == [
        EPOCH + timedelta(seconds=15 * cycle) for cycle in range(4)
    ]  # the scrapes are stamped with the collector's clock
    failures = [s for s in rows if not s["ok"]]
    errors = " | ".join(str(s["error"]) for s in failures)
    assert "500" in errors
    assert "line" in errors  # the garbage page's error names the line
    assert "timed out" in errors.lower() or "timeout" in errors.lower()
    gaps = store.query("SELECT target, start_ts, end_ts, reason FROM collection_gaps").to_pylist()
    assert len(gaps) == 1
    assert gaps[0]["start_ts"] < gaps[0]["end_ts"]
    # from flaky's last good page (cycle 0) to its return (cycle 3)
    assert (gaps[0]["start_ts"], gaps[0]["end_ts"]) == (EPOCH, EPOCH + timedelta(seconds=45))
    assert "500" in gaps[0]["reason"]
    collector.close_open_gaps()  # broken is still failing at shutdown
    store.flush()
    assert _count(store, "SELECT count(*) AS n FROM collection_gaps") == 2
    store.close()


def test_cycles_keep_their_interval_and_skip_the_ticks_a_slow_cycle_missed(
    tmp_path: Path, switches: dict[str, Switch]
) -> None:
    store = Store(tmp_path / "store.duckdb")
    clock = FakeClock()
    good = {"good": switches["good"]}
    slow_at_seconds = 30.0

    class SlowOnce(Switch):
        def answer(self) -> Answer | None:
            if clock.monotonic() == slow_at_seconds:
                clock.advance(40)  # this cycle takes 40 simulated seconds: two ticks missed
            return super().answer()

    good["good"] = SlowOnce(switches["good"].endpoint, switches["good"].released)
    collector = _simulated(tmp_path, store, good, clock)
    asyncio.run(collector.run(cycles=5))
    store.flush()
    stamps = [row["ts"] for row in store.query("SELECT ts FROM scrapes ORDER BY ts").to_pylist()]
    # 0, 15, 30 on time; the slow cycle ends at 70, so the next runs at once, then every 15 s
    assert stamps == [EPOCH + timedelta(seconds=s) for s in (0, 15, 30, 70, 85)]
    assert clock.sleeps == [15, 15, 0, 15, 15]
    assert collector.cycles == 5
    assert _count(store, "SELECT count(*) AS n FROM gpu_samples") == 5 * 8
    store.close()


class CountingScheduler:
    """Captured slurmrestd output, with the simulated time of every poll."""

    name = "slurmrestd"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.polled_at_seconds: list[float] = []

    def fetch(self) -> SchedulerSnapshot:
        self.polled_at_seconds.append(self.clock.monotonic())
        body = (FIXTURES / "slurm" / "debian-22.05" / "restd_v0.0.38_jobs.json").read_bytes()
        return parse_slurmrestd_jobs(body, source="restd")


def test_the_scheduler_is_polled_on_its_own_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    scheduler = CountingScheduler(clock)
    with Store(tmp_path / "store.duckdb") as store:
        slurm = SlurmPoll(store, scheduler, None, poll_seconds=40, wait_seconds=5, clock=clock)
        collector = Collector(
            store, [slurm], config=CollectorConfig(scrape_interval_seconds=15), clock=clock
        )
        asyncio.run(collector.run(cycles=6))  # cycles at 0, 15, ... 75 simulated seconds
        store.flush()
        assert scheduler.polled_at_seconds == [0, 45]  # the first cycle, then once 40 s passed
        assert _count(store, "SELECT count(*) AS n FROM jobs") == 10


def test_collector_thread_survives_and_stops(tmp_path: Path, switches: dict[str, Switch]) -> None:
    """The real thread, the real clock, real loopback servers (one of them hanging)."""
    servers = [serve_routes("127.0.0.1", 0, {"/metrics": switches[name]})[0] for name in NAMES]
    hosts = {
        name: f"127.0.0.1:{server.server_address[1]}"
        for name, server in zip(NAMES, servers, strict=True)
    }
    store = Store(tmp_path / "store.duckdb")
    collector = collector_for(
        store,
        Settings(
            scrape_interval_seconds=0.05,
            scrape_timeout_seconds=0.2,
            dcgm=DcgmSection(targets_path=_targets_file(tmp_path / "targets.json", hosts)),
            node=NodeSection(targets_path=_targets_file(tmp_path / "targets.json", hosts)),
        ),
    )
    switches["broken"].mode = "hang"
    try:
        collector.start()
        deadline = time.monotonic() + 10
        while collector.cycles < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        collector.stop()
        assert collector.cycles >= 3
        assert not any(
            t.name == "hpcscope-collector" and t.is_alive() for t in threading.enumerate()
        )
        store.flush()
        assert _count(store, "SELECT count(*) AS n FROM scrapes WHERE NOT ok") >= 3
        assert _count(store, "SELECT count(*) AS n FROM gpu_samples") >= 3 * 2 * 8
    finally:
        switches["broken"].released.set()
        for server in servers:
            server.shutdown()
            server.server_close()
        store.close()


def test_xid_counts_of_a_dcgm_page_are_stored_with_their_job(tmp_path: Path) -> None:
    """dcgm-exporter's ``DCGM_EXP_XID_ERRORS_COUNT{xid}`` reaches ``gpu_xid_counts`` (GM-4)."""
    node = TOPOLOGY.node("gpu01")
    mapping_dir = tmp_path / "mapping"
    mapping.add_job(mapping_dir, "2", "500")
    memory = node.gpus[0].model.memory_bytes
    busy = shares_for(Profile.HEALTHY, gpu_index=0, straggler_gpu=None, memory_bytes=memory)
    endpoint = DcgmEndpoint(
        "gpu01",
        node.gpus,
        mapping_dir,
        shares=lambda i: busy if i == 2 else None,
        xid_source=lambda i: 31 if i == 2 else 0,
    )
    store = Store(tmp_path / "store.duckdb")
    switches = {"good": Switch(endpoint, threading.Event())}
    collector = _simulated(tmp_path, store, switches, FakeClock())

    async def run() -> None:
        try:
            await collector.collect_once()
        finally:
            await collector.aclose()

    asyncio.run(run())
    store.flush()
    rows = store.query("SELECT node, gpu, job_id, xid, xid_count FROM gpu_xid_counts").to_pylist()
    assert rows == [{"node": "node-good", "gpu": 2, "job_id": "500", "xid": 31, "xid_count": 1.0}]
    store.close()
