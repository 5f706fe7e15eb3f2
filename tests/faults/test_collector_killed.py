"""``kill -9`` of the collector mid-ingest, then a restart on the same store file.

Real processes: the twin serves dcgm-exporter pages on loopback, ``hpcscope serve`` scrapes
them every second into a DuckDB file. The server is killed with SIGKILL while it ingests (no
handler runs, queued writes are lost, the write-ahead log is left as it was). The samples the
file holds are counted by a read-only open once the process is dead, and again after a
restart and a clean stop: every committed sample is still there (0 lost). The outage is a
``collection_gaps`` row per target (no samples inside it, never zeros), and an ``OPS-1``
collection-health alert per target is raised.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hpcscope.service.collect.health import RULE_ID
from hpcscope.store import Store
from tests.support.processes import api, kill9, serve, spawn, stop, wait_for
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

#: The collector reason of a gap left by its own outage (service/collect/health.py).
OUTAGE_REASON = "not scraped: the collector was not running or stalled"
#: Longer than the gap threshold (2 x 1 s interval + 5 s timeout).
OUTAGE_SECONDS = 10.0


def _committed(store_path: Path) -> dict[str, Any]:
    """What the file holds, read by a second process-level open (read-only)."""
    with Store(store_path, read_only=True) as store:
        row = store.query(
            "SELECT count(*) AS n, max(ts) AS last, "
            "coalesce(sum(hash(ts, node, gpu)), 0)::HUGEINT AS digest FROM gpu_samples"
        ).to_pylist()[0]
    return dict(row)


def _committed_until(store_path: Path, until: datetime) -> dict[str, Any]:
    with Store(store_path, read_only=True) as store:
        row = store.query(
            "SELECT count(*) AS n, max(ts) AS last, "
            "coalesce(sum(hash(ts, node, gpu)), 0)::HUGEINT AS digest "
            "FROM gpu_samples WHERE ts <= ?",
            [until],
        ).to_pylist()[0]
    return dict(row)


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "twin"
    process = spawn(
        [
            "twin",
            "run",
            "--state-dir",
            str(state),
            "--seed",
            "42",
            "--speed",
            "10",
            "--arrivals-per-hour",
            "0",
        ],
        tmp_path / "twin.log",
    )
    try:
        wait_for(lambda: (state / "twin.json").exists(), "the twin")
        yield state / "targets.json"
    finally:
        stop(process)


def _dcgm_targets(targets_file: Path) -> set[str]:
    groups = json.loads(targets_file.read_text())
    return {
        f"http://{address}/metrics"
        for group in groups
        if group.get("labels", {}).get("exporter", "dcgm") == "dcgm"
        for address in group["targets"]
    }


def test_sigkill_mid_ingest_loses_no_committed_sample(tmp_path: Path, twin: Path) -> None:
    store_path = tmp_path / "store.duckdb"
    port = free_port()
    args = ["--targets", str(twin), "--scrape-interval", "1"]
    server, base = serve(store_path, port, tmp_path / "server.log", *args)
    try:
        healthy = wait_for(
            lambda: [t for t in api(base, "/api/cluster")["targets"] if t["last_samples"]],
            "scraped samples",
        )
        time.sleep(3.0)  # a few more cycles: the kill lands while the collector ingests
    finally:
        kill9(server)
    before = _committed(store_path)
    assert before["n"] > 0, "nothing was committed before the kill"
    time.sleep(OUTAGE_SECONDS)

    server, base = serve(store_path, port, tmp_path / "server2.log", *args)
    try:
        targets = {t["target"] for t in healthy}

        def outage_gaps() -> list[dict[str, Any]]:
            gaps = api(base, "/api/cluster")["gaps"]
            found = [g for g in gaps if g["reason"] == OUTAGE_REASON]
            return found if {g["target"] for g in found} >= targets else []

        gaps = wait_for(outage_gaps, "the outage recorded as gaps", timeout=60)
        alerts = wait_for(
            lambda: [a for a in api(base, "/api/alerts")["alerts"] if a["rule_id"] == RULE_ID],
            "the collection-health alert",
        )
    finally:
        stop(server)

    after = _committed_until(store_path, before["last"])
    lost = before["n"] - after["n"]
    print(f"committed before kill: {before['n']} samples; after restart: {after['n']}; lost {lost}")
    assert lost == 0
    assert after["digest"] == before["digest"]  # the same rows, not just as many
    assert _committed(store_path)["n"] > before["n"]  # and collection resumed

    # the outage is a gap, and no sample (zero or otherwise) lies inside it
    with Store(store_path, read_only=True) as store:
        for gap in store.query(
            "SELECT * FROM collection_gaps WHERE reason = ? AND target IN "
            "(SELECT target FROM scrapes WHERE exporter = 'dcgm')",
            [OUTAGE_REASON],
        ).to_pylist():
            assert (gap["end_ts"] - gap["start_ts"]).total_seconds() >= OUTAGE_SECONDS
            inside = store.query(
                "SELECT count(*) AS n FROM gpu_samples WHERE node = ? AND ts > ? AND ts < ?",
                [gap["node"], gap["start_ts"], gap["end_ts"]],
            ).to_pylist()[0]["n"]
            assert inside == 0, f"{inside} samples drawn inside the outage of {gap['node']}"
    assert {g["target"] for g in gaps} >= targets
    assert {a["subject"] for a in alerts} >= targets
    assert all(a["vector_name"] == "service_level" for a in alerts)
