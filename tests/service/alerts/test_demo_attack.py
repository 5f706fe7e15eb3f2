"""The demo shows an open alert out of the box: the twin writes its opening attack in Falco's
JSON, the server's tail and engine turn it into an alert on alice's job, Threats mode counts it.
Also ``hpcscope twin attack``: a scenario appended to the tailed file becomes alerts."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.ingest.slurm import parse_slurmrestd_jobs
from hpcscope.model.topology import load_topology
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import FalcoSection
from hpcscope.twin.cluster import TwinCluster
from tests.support.collect import collector_for, run_cycles

runner = CliRunner()


def test_the_demo_twin_attacks_and_threats_mode_shows_it(tmp_path: Path) -> None:
    twin_dir = tmp_path / "twin"
    with TwinCluster(
        load_topology(bundled_topology()), twin_dir, seed=1, arrivals_per_hour=0
    ) as twin:
        info = json.loads((twin_dir / "twin.json").read_text())
        body = urllib.request.urlopen(f"{twin.slurmrestd_url}/slurm/v0.0.40/jobs").read()
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        falco=FalcoSection(events_path=Path(info["falco_events_path"])),
    )
    service = Service.open(settings, users=UserDirectory.demo())
    try:
        service.store.upsert_jobs(parse_slurmrestd_jobs(body, source="twin").jobs)
        service.store.flush()
        # the server's sources for these settings: Falco's file and the alert engine
        collector = collector_for(service.store, settings, rules=service.rules)
        assert [source.name for source in collector.sources] == ["falco", "security_events"]
        (cycle,) = run_cycles(collector)
        assert cycle.alerts_written == 1
        alice = service.principal("alice")
        bob = service.principal("bob")
        assert alice is not None and bob is not None
        (alert,) = service.alerts(alice)
        assert (alert.rule_id, alert.user, alert.account, alert.state.value) == (
            "SC-2", "alice", "vision", "open",
        )  # fmt: skip
        assert "hpcscope Executable run from a temp directory" in alert.evidence[0].summary
        assert service.alerts(bob) == []
        state = live_state(service, Viewer(alice))
        assert state.alerts.configured and state.alerts.by_vector == {"supply-chain": 1}
        assert state.alerts.worst_by_node == {str(alert.node): "HIGH"}
        # the README's "play an attack": another scenario appended to the same file
        played = runner.invoke(
            app,
            ["twin", "attack", "release-agent-escape", "--falco", info["falco_events_path"],
             "--job", str(alert.job_id), "--node", str(alert.node), "--json"],
        )  # fmt: skip
        assert played.exit_code == 0, played.output
        assert json.loads(played.stdout)["written"] == {info["falco_events_path"]: 1}
        (cycle,) = run_cycles(collector)
        assert cycle.alerts_written == 1
        rules = sorted(a.rule_id for a in service.alerts(alice))
        assert rules == ["CE-1", "SC-2"]
        unknown = runner.invoke(app, ["twin", "attack", "nope", "--falco", str(tmp_path / "f")])
        assert unknown.exit_code == 2 and "supply-chain-miner" in unknown.output
    finally:
        service.close()
