"""The demo twin's incidents: one per threat vector in the first minutes of every 10, in real
formats the production pipeline turns into alerts; its slurmrestd cancels and its webhook
keeps what it is sent."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import httpx2
import pytest

from hpcscope.model.access import system_principal
from hpcscope.model.alerts import VECTOR_NAMES
from hpcscope.model.topology import load_topology
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.core import Service
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.service.notify.scheduler import CancelFailed, SlurmrestdCommands
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.tetragon_policy import protected_roots
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import FalcoSection, TetragonSection
from hpcscope.twin.cluster import TwinCluster
from hpcscope.twin.live_incidents import CYCLE_SECONDS, SCHEDULE, LiveIncidents
from hpcscope.twin.scheduler import Scheduler
from hpcscope.twin.slurmrestd import jobs_response

TOPOLOGY = load_topology(bundled_topology())
START = 1_796_000_000.0


def _demo_jobs(tmp_path: Path) -> Scheduler:
    scheduler = Scheduler(TOPOLOGY, tmp_path / "nodes", start_time=START, arrivals_per_hour=0)
    scheduler.submit_demo_scenario()
    scheduler.tick(START)
    return scheduler


def test_every_vector_in_the_first_45_seconds_of_each_cycle(tmp_path: Path) -> None:
    scheduler = _demo_jobs(tmp_path)
    incidents = LiveIncidents(tmp_path, start=START, checkpoint_root=TOPOLOGY.checkpoint_root)
    for second in range(0, 2 * int(CYCLE_SECONDS), 5):
        scheduler.tick(START + second)
        incidents.advance(START + second, scheduler.jobs.values())
    vectors = [vector for _, vector in incidents.played]
    assert vectors == [p.vector for p in SCHEDULE] * 2
    assert set(vectors) == set(VECTOR_NAMES.values())
    assert max(t for t, _ in incidents.played[:6]) - START <= 45
    assert incidents.falco_path.exists() and incidents.tetragon_path.exists()
    assert list(incidents.integrity_root.glob("*/rank-*.jsonl"))
    assert TOPOLOGY.checkpoint_root in incidents.tetragon_path.read_text()


def test_nothing_is_played_before_the_anchor_and_the_cycles_count_from_it(tmp_path: Path) -> None:
    scheduler = _demo_jobs(tmp_path)
    incidents = LiveIncidents(tmp_path, start=None, checkpoint_root=TOPOLOGY.checkpoint_root)
    for second in range(0, 300, 5):  # the history being written: nobody reads the twin yet
        assert incidents.advance(START + second, scheduler.jobs.values()) == []
    anchor = START + 300 + 2.5
    incidents.anchor(anchor)
    incidents.anchor(anchor + 100)  # a later poll moves nothing
    for second in range(300, 300 + int(CYCLE_SECONDS) + 60, 5):
        incidents.advance(START + second, scheduler.jobs.values())
    first, second_cycle = incidents.played[: len(SCHEDULE)], incidents.played[len(SCHEDULE) :]
    assert [v for _, v in first] == [v for _, v in second_cycle] == [p.vector for p in SCHEDULE]
    assert all(anchor < t <= anchor + 45 for t, _ in first)
    assert all(anchor + CYCLE_SECONDS < t <= anchor + CYCLE_SECONDS + 45 for t, _ in second_cycle)


def test_a_twin_read_long_after_its_start_plays_the_first_cycle_after_the_first_poll(
    tmp_path: Path,
) -> None:
    """The demo's twin runs for the history's 15-30 s before its job list is first polled:
    the first cycle's incidents come after that poll (the counters' sensors read increases
    from their first reading), not from the twin's start."""
    with TwinCluster(TOPOLOGY, tmp_path, seed=1, speed=200.0, arrivals_per_hour=0) as twin:
        time.sleep(0.6)  # two simulated minutes unread: the old anchor played the whole cycle
        assert twin.incidents.played == []
        before = twin.now()
        urllib.request.urlopen(f"{twin.slurmrestd_url}/slurm/v0.0.40/jobs").read()
        after = twin.now()
        deadline = time.monotonic() + 10
        while len(twin.incidents.played) < len(SCHEDULE) and time.monotonic() < deadline:
            time.sleep(0.05)
        played = list(twin.incidents.played)
    assert [v for _, v in played[: len(SCHEDULE)]] == [p.vector for p in SCHEDULE]
    anchor = twin.incidents.start
    assert anchor is not None and before <= anchor <= after
    assert all(anchor < t for t, _ in played)


def test_the_production_pipeline_raises_an_alert_on_every_vector(tmp_path: Path) -> None:
    """The twin's lines through the alert engine (tails, Tetragon's /proc lookup) and the
    integrity spool, as the demo's server reads them."""
    scheduler = _demo_jobs(tmp_path / "twin")
    incidents = LiveIncidents(
        tmp_path / "twin", start=START, checkpoint_root=TOPOLOGY.checkpoint_root
    )
    for second in range(0, 100, 5):
        incidents.advance(START + second, scheduler.jobs.values())
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        falco=FalcoSection(events_path=incidents.falco_path),
        tetragon=TetragonSection(
            events_path=incidents.tetragon_path, proc_root=incidents.proc_root
        ),
    )
    service = Service.open(settings)
    try:
        from hpcscope.ingest.slurm import parse_slurmrestd_jobs
        from hpcscope.service.collect.scheduler import apply_snapshot

        body = jobs_response(scheduler.jobs.values(), cluster="c", now=START + 200)
        apply_snapshot(service.store, parse_slurmrestd_jobs(json.dumps(body), source="twin"))
        engine = SecurityCollection(
            service.store,
            SecurityEventBuffer(),
            service.rules,
            checkpoint_roots=[TOPOLOGY.checkpoint_root],
            protected_roots=protected_roots(TOPOLOGY),
            falco_path=settings.falco.events_path,
            tetragon_path=settings.tetragon.events_path,
            proc_root=settings.tetragon.proc_root,
        )  # what the demo's falco, tetragon and security_events sources do
        engine.collect_once()
        IntegritySpool(service.store, incidents.integrity_root, service.rules).collect_once()
        alerts = service.alerts(system_principal("test"))
        assert {VECTOR_NAMES[a.vector] for a in alerts if a.vector} == set(VECTOR_NAMES.values())
        jobs = {str(j) for j in scheduler.jobs}
        assert all(a.job_id in jobs for a in alerts if a.job_id is not None)
    finally:
        service.close()


def test_slurmrestd_cancels_and_the_webhook_keeps_what_it_is_sent(tmp_path: Path) -> None:
    with TwinCluster(TOPOLOGY, tmp_path, seed=1, arrivals_per_hour=0) as twin:
        job = next(iter(twin.scheduler.jobs.values()))
        commands = SlurmrestdCommands(twin.slurmrestd_url)
        said = commands.cancel(str(job.job_id), reason="idle for 30 min")
        assert "ok" in said and twin.scheduler.jobs[job.job_id].state.value == "CANCELLED"
        with pytest.raises(CancelFailed, match="already completing or completed"):
            commands.cancel(str(job.job_id), reason="again")
        with pytest.raises(CancelFailed, match="404"):
            commands.cancel("999999", reason="no such job")
        posted = httpx2.post(f"{twin.slurmrestd_url}/hooks/notify", json={"text": "hi\nthere"})
        assert posted.status_code == 200
        assert json.loads(twin.webhook_path.read_text())["text"] == "hi\nthere"


def test_tetragons_export_exists_from_the_start(tmp_path: Path) -> None:
    """Empty until the first incident, but there: the demo's Tetragon and eBPF collectors read
    a file that exists (a missing one is a failing collector on the diagram)."""
    with TwinCluster(TOPOLOGY, tmp_path, seed=1, arrivals_per_hour=0) as twin:
        assert twin.incidents.tetragon_path.read_text() == ""
        info = json.loads((tmp_path / "twin.json").read_text())
        assert info["tetragon_events_path"] == str(twin.incidents.tetragon_path)
