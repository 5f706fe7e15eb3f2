"""The alert engine on a real store: tailed Falco/Tetragon files and the HTTP buffer drained
each collector cycle, alerts attributed through the store's jobs and deduplicated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Severity
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import FalcoSection
from hpcscope.store import Store
from hpcscope.store.alerts import alerts
from hpcscope.twin import attacks
from hpcscope.twin.attacks import JOBS, SECOND_NS
from tests.support.aio import run_async
from tests.support.collect import collector_for

T0 = 1_796_126_400 * SECOND_NS
ALL = JobScope(all_jobs=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "store.duckdb")
    rows = [
        dict.fromkeys(JOB_SCHEMA.names)
        | {"job_id": job, "user": user, "account": account, "source": "test"}
        for job, (user, account) in JOBS.items()
    ]
    opened.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA))
    opened.flush()
    yield opened
    opened.close()


def _collection(store: Store, tmp_path: Path) -> SecurityCollection:
    miner = attacks.supply_chain_miner(T0)
    miner.proc.write(tmp_path / "proc")
    return SecurityCollection(
        store,
        SecurityEventBuffer(),
        load_site_rules(None),
        checkpoint_roots=[attacks.CHECKPOINTS],
        falco_path=tmp_path / "falco.json",
        tetragon_path=tmp_path / "tetragon.log",
        proc_root=tmp_path / "proc",
    )


def test_tailed_files_become_stored_deduplicated_alerts(store: Store, tmp_path: Path) -> None:
    collection = _collection(store, tmp_path)
    miner = attacks.supply_chain_miner(T0)
    falco = attacks.falco_miner(T0 + 20 * SECOND_NS)
    (tmp_path / "tetragon.log").write_text("\n".join(miner.tetragon[:4]) + "\n")
    (tmp_path / "falco.json").write_text("not json\n" + falco.falco[0] + "\n")
    first = collection.collect_once()
    assert (first.falco_rows, first.tetragon_rows) == (1, 4)
    assert first.errors and first.errors[0].startswith(f"{tmp_path / 'falco.json'}:1")
    found = {(a.rule_id, a.subject): a for a in alerts(store, ALL)}
    sc2 = found[("SC-2", "/tmp/ultralytics_runner")]
    # Tetragon's exec and Falco's alert of the same miner are one alert
    assert sc2.count == 2 and sc2.severity is Severity.HIGH
    assert (sc2.job_id, sc2.user, sc2.account, sc2.gpu) == ("4410001", "alice", "vision", None)
    with (tmp_path / "tetragon.log").open("a") as handle:
        handle.write(miner.tetragon[4] + "\n")
    second = collection.collect_once()
    assert second.tetragon_rows == 1 and second.alerts == 2  # SC-2 merged, SC-3 new
    found = {(a.rule_id, a.subject): a for a in alerts(store, ALL)}
    sc2 = found[("SC-2", "/tmp/ultralytics_runner")]
    assert sc2.count == 3 and sc2.severity is Severity.CRITICAL
    assert sc2.evidence[0].source == str(tmp_path / "tetragon.log")
    assert sc2.evidence[0].position == "line 5"
    assert sorted(rule for rule, _ in found) == ["SC-1", "SC-1", "SC-2", "SC-3"]
    assert collection.collect_once().alerts == 0  # nothing new: nothing written
    store.flush()
    polls = store.query(
        "SELECT exporter, ok, samples, rejected_lines FROM scrapes ORDER BY ts, exporter"
    ).to_pylist()
    assert [(p["exporter"], p["samples"], p["rejected_lines"]) for p in polls] == [
        ("falco", 1, 1), ("tetragon", 4, 0), ("falco", 0, 0), ("tetragon", 1, 0),
        ("falco", 0, 0), ("tetragon", 0, 0),
    ]  # fmt: skip
    assert all(p["ok"] for p in polls)


def test_the_http_buffer_is_drained_by_the_collector_cycle(store: Store, tmp_path: Path) -> None:
    buffer = SecurityEventBuffer()
    line = attacks.miner_falco_line(job_id="4410002", node="gpu02", user="bob", time_ns=T0)
    buffer.put("falco", parse_falco_lines([line.encode()], source="http:10.0.0.5"))
    settings = Settings(
        store_path=tmp_path / "unused.duckdb", falco=FalcoSection(ingest_token="secret")
    )
    collector = collector_for(store, settings, rules=load_site_rules(None), buffer=buffer)
    assert [source.name for source in collector.sources] == ["security_events"]

    async def once() -> int:
        try:
            return (await collector.collect_once()).of("security_events").alerts
        finally:
            await collector.aclose()

    assert run_async(once()) == 1
    (alert,) = alerts(store, ALL)
    assert (alert.rule_id, alert.node, alert.user, alert.account) == ("SC-2", "gpu02", "bob", "nlp")
    assert alert.evidence[0].source == "http:10.0.0.5" and len(buffer) == 0
