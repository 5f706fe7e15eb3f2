"""Golden test of hpcscope's own /metrics, and its access rule."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from hpcscope.model.alerts import Alert, AlertState, Severity, Vector
from hpcscope.model.schemas import LUSTRE_JOB_STATS_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.collect.collector import Collector
from hpcscope.service.collect.source import FakeSource, Health, Poll
from hpcscope.service.core import Service
from hpcscope.service.settings import load_settings
from hpcscope.store.alerts import set_alert_state, upsert_alerts
from hpcscope.store.lustre import append_job_stats
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, basic_auth, demo_users
from tests.support.clock import FakeClock
from tests.support.data import populate

GOLDEN = Path(__file__).parent / "golden" / "metrics.txt"


def test_metrics_text_is_golden(service: Service, client_as: Callable[[str], TestClient]) -> None:
    now = utcnow()
    populate(service.store, now=now)
    supply, high = Vector.SUPPLY_CHAIN, Severity.HIGH
    found = [
        Alert("SC-2", supply, Severity.CRITICAL, "t", now, now, node="n1", job_id="101"),
        Alert("SC-1", supply, high, "t", now, now, node="n1", job_id="101"),
        Alert("RD-4", Vector.RDMA, high, "t", now, now, node="n2"),
        Alert("CE-3", Vector.CONTAINER_ESCAPE, high, "t", now, now, node="n2"),
    ]
    upsert_alerts(service.store, found).result()
    set_alert_state(service.store, found[3].key, AlertState.RESOLVED, by="x", at=now).result()
    response = client_as("admin").get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    # the version and the migration count move with every release: the rest must not
    text = re.sub(r'version="[^"]+"', 'version="X"', response.text)
    text = re.sub(
        r"(?m)^hpcscope_store_schema_version \S+$", "hpcscope_store_schema_version N", text
    )
    # what the kept views cost and DuckDB holds depend on the machine: the names stay
    text = re.sub(
        r"(?m)^(hpcscope_store_(memory|memory_limit|spilled)_bytes\S*) \S+$", r"\1 N", text
    )
    text = re.sub(r"(?m)^(hpcscope_view_\w+(\{[^}]*\})?) \S+$", r"\1 N", text)
    if os.environ.get("HPCSCOPE_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert all(name.startswith("hpcscope_") for name in names)


def test_metrics_follow_naming_rules(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    populate(service.store, now=utcnow())
    text = client_as("admin").get("/metrics").text
    for family in text_string_to_metric_families(text):
        assert family.documentation, family.name
        for sample in family.samples:
            # user, account, partition only on the info family (bounded, joinable labels)
            if family.name != "hpcscope_job_info":
                assert not {"user", "account", "partition"} & set(sample.labels)


def test_openmetrics_on_request(service: Service, client_as: Callable[[str], TestClient]) -> None:
    response = client_as("admin").get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


def test_metrics_are_for_admins_only(
    service: Service, client: TestClient, client_as: Callable[[str], TestClient]
) -> None:
    assert client.get("/metrics").status_code == 401
    for user in ("alice", "carol"):
        assert client_as(user).get("/metrics").status_code == 403


def _job_stats(
    job: str, host: str, operation: str, points: list[tuple[datetime, float]]
) -> list[dict[str, object]]:
    """Snapshots of one job_stats entry's operation (an entry begun before the window)."""
    began = points[0][0] - timedelta(minutes=10)
    return [
        {
            "ts": ts,
            "server": "oss1",
            "target": "scratch-OST0000",
            "component": "ost",
            "job_id_raw": f"{job}:1000:{host}",
            "job_id": job,
            "host": host,
            "operation": operation,
            "unit": "bytes",
            "samples": float(i),
            "sum_value": total,
            "min_value": None,
            "max_value": None,
            "start_ts": began,
        }
        for i, (ts, total) in enumerate(points)
    ]


def test_lustre_throughput_of_running_jobs(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    now = utcnow()
    populate(service.store, now=now)
    at = [now - timedelta(minutes=m) for m in (4, 2, 1)]
    rows = [
        *_job_stats("101", "gpu01", "read_bytes", list(zip(at, [0.0, 6e9, 9e9], strict=True))),
        *_job_stats("101", "gpu01", "write_bytes", list(zip(at, [0.0, 1e9, 1.8e9], strict=True))),
        # a job that is not running (no GPU samples in the last 5 minutes) is not exported
        *_job_stats("999", "gpu02", "read_bytes", list(zip(at, [0.0, 1e9, 2e9], strict=True))),
    ]
    table = pa.Table.from_pylist(rows, schema=LUSTRE_JOB_STATS_SCHEMA)
    append_job_stats(service.store, table).result()
    text = client_as("admin").get("/metrics").text
    samples = {
        (sample.name, sample.labels["job_id"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("hpcscope_job_storage_")
        for sample in family.samples
    }
    # 9 GB read and 1.8 GB written from the snapshot 4 minutes ago to the one 1 minute ago
    assert samples == {
        ("hpcscope_job_storage_read_bytes_per_second", "101"): 9e9 / 180,
        ("hpcscope_job_storage_write_bytes_per_second", "101"): 1.8e9 / 180,
    }


def test_the_store_memory_limit_is_the_sites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``store_memory_limit_bytes`` (here from the environment, as a unit would set it) is
    DuckDB's limit, and /metrics shows it with what the store holds under it."""
    monkeypatch.setenv("HPCSCOPE_STORE_MEMORY_LIMIT_BYTES", str(200 * 1024 * 1024))
    settings = load_settings(
        store_path=tmp_path / "s.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
    )
    assert settings.store_limits().memory_limit_bytes == 200 * 1024 * 1024
    service = Service.open(settings, users=demo_users())
    try:
        populate(service.store, now=utcnow())
        with TestClient(create_app(service), headers=basic_auth("admin")) as client:
            text = client.get("/metrics").text
    finally:
        service.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (limit,) = families["hpcscope_store_memory_limit_bytes"].samples
    assert limit.value == 200 * 1024 * 1024
    held = {s.labels["tag"]: s.value for s in families["hpcscope_store_memory_bytes"].samples}
    assert 0 < sum(held.values()) <= limit.value


def test_the_collectors_cycles_polls_and_hooks_are_timed(service: Service) -> None:
    """A server that collects shows how long its cycles, each source's poll and each
    after-cycle hook took: count, sum and the longest (which part held a late cycle)."""

    def publish() -> None:
        return None

    collector = Collector(
        service.store,
        [FakeSource("dcgm", lambda now: Poll(Health("dcgm", now, rows=1)))],
        clock=FakeClock(),
        after_cycle=[publish],
    )
    for _ in range(3):
        asyncio.run(collector.collect_once())
    app = create_app(service)
    app.state.collector = collector
    with TestClient(app, headers=basic_auth("admin")) as client:
        text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    took = families["hpcscope_collector_phase_seconds"]
    counts = {s.labels["phase"]: s.value for s in took.samples if s.name.endswith("_count")}
    assert counts == {"cycle": 3, "poll:dcgm": 3, "hook:publish": 3}
    sums = {s.labels["phase"]: s.value for s in took.samples if s.name.endswith("_sum")}
    longest = {
        s.labels["phase"]: s.value for s in families["hpcscope_collector_phase_max_seconds"].samples
    }
    assert set(sums) == set(longest) == set(counts)
    assert all(0 <= longest[p] <= sums[p] for p in counts)
    assert sums["cycle"] >= sums["poll:dcgm"] + sums["hook:publish"]


def test_a_server_that_does_not_collect_shows_no_collector_timings(
    client_as: Callable[[str], TestClient],
) -> None:
    text = client_as("admin").get("/metrics").text
    assert "hpcscope_collector_phase" not in text
