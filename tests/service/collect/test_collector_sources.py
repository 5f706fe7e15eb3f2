"""The collector's other sources: a real node_exporter (InfiniBand) and the twin's slurmrestd."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hpcscope.model.topology import load_topology
from hpcscope.service.collect.scheduler import SlurmrestdSource
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import DcgmSection, NodeSection, SlurmSection
from hpcscope.service.sources import build_sources
from hpcscope.service.sources.slurm import SlurmPoll
from hpcscope.store import Store
from hpcscope.twin.cluster import TwinCluster
from tests.support.collect import collector_for, context_for
from tests.support.node_exporter import node_exporter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "infiniband"


def test_node_exporter_targets_fill_infiniband_counters_and_slurmrestd_fills_jobs(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store.duckdb")
    with (
        node_exporter(FIXTURES / "sysfs_h100_gpud") as url,
        TwinCluster(
            load_topology(bundled_topology()), tmp_path / "twin", arrivals_per_hour=0
        ) as twin,
    ):
        targets = json.loads((tmp_path / "twin" / "targets.json").read_text())
        host_port = url.removeprefix("http://").removesuffix("/metrics")
        targets.append(
            {"targets": [host_port], "labels": {"exporter": "node", "node": "real-node"}}
        )
        (tmp_path / "targets.json").write_text(json.dumps(targets))
        collector = collector_for(
            store,
            Settings(
                scrape_interval_seconds=1,
                dcgm=DcgmSection(targets_path=tmp_path / "targets.json"),
                node=NodeSection(targets_path=tmp_path / "targets.json"),
                slurm=SlurmSection(url=twin.slurmrestd_url, poll_seconds=0.01),
            ),
        )

        async def run() -> None:
            try:
                await collector.collect_once()
            finally:
                await collector.aclose()

        asyncio.run(run())
        store.flush()
    ports = store.query(
        "SELECT node, count(*) AS n FROM ib_port_counters GROUP BY node ORDER BY node"
    ).to_pylist()
    # the real node_exporter over a captured H100 sysfs tree (8 NDR + 1 Ethernet ports), and
    # the twin's own node_exporter pages (8 HCAs per node)
    assert ports == [
        {"node": "gpu01", "n": 8},
        {"node": "gpu02", "n": 8},
        {"node": "real-node", "n": 9},
    ]
    jobs = store.query('SELECT job_id, "user", account, gpus FROM jobs ORDER BY job_id')
    assert [row["user"] for row in jobs.to_pylist()] == ["alice", "bob", "dave", "bob", "alice"]
    health = store.query("SELECT exporter, ok FROM scrapes ORDER BY exporter").to_pylist()
    assert {row["exporter"] for row in health} == {"dcgm", "node", "slurmrestd"}
    assert all(row["ok"] for row in health)
    store.close()


def _slurm(store: Store, settings: Settings) -> SlurmPoll:
    ((source,),) = build_sources(context_for(store, settings))
    assert isinstance(source, SlurmPoll)
    return source


def test_settings_choose_the_scheduler_source(tmp_path: Path) -> None:
    with Store(tmp_path / "store.duckdb") as store:
        rest = _slurm(
            store, Settings(slurm=SlurmSection(url="http://ctl:6820", api_version="v0.0.38"))
        )
        assert isinstance(rest.scheduler, SlurmrestdSource)
        assert rest.scheduler.version == "v0.0.38"
        commands = _slurm(store, Settings(slurm=SlurmSection(source="commands", associations=True)))
        assert commands.scheduler.name == "slurm-commands" and commands.associations is not None
        assert build_sources(context_for(store, Settings())) == []
