"""``/api/cluster``, ``/api/whoami`` and ``/healthz`` emit what their contracts describe."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.model.timeutil import iso_z, utcnow
from hpcscope.serve.contracts import ClusterState, Health, WhoAmI
from hpcscope.serve.routes.cluster import OVERVIEW_GAPS
from hpcscope.service.core import Service
from hpcscope.service.jobs.reports import HEALTH_GAPS
from tests.support.data import populate


def test_cluster_is_a_cluster_state(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    now = utcnow()
    populate(service.store, now=now)
    scrapes = [
        {"ts": now - timedelta(seconds=s), "target": "http://gpu01:9400/metrics",
         "exporter": "dcgm", "node": "gpu01", "ok": s != 10, "duration_seconds": 0.01,
         "samples": 100, "rejected_lines": 0, "error": None if s != 10 else "timeout"}
        for s in (5, 10)
    ]  # fmt: skip
    gap = {"target": "http://gpu01:9400/metrics", "node": "gpu01", "start_ts": now,
           "end_ts": now, "reason": "scrape failed"}  # fmt: skip
    service.store.append("scrapes", pa.Table.from_pylist(scrapes, schema=SCRAPE_SCHEMA))
    service.store.append("collection_gaps", pa.Table.from_pylist([gap], schema=GAP_SCHEMA))
    service.store.flush()
    body = client_as("admin").get("/api/cluster").content
    state = ClusterState.model_validate_json(body)
    assert len(state.targets) == 1 and state.targets[0].failures_since_success == 0
    assert [g.reason for g in state.gaps] == ["scrape failed"]
    adapter = TypeAdapter(ClusterState)
    # an unknown key would be dropped by the round trip, a missing one added: both differ
    assert adapter.dump_python(adapter.validate_json(body), mode="json") == (
        TypeAdapter(object).validate_json(body)
    )


def test_whoami_and_healthz_are_their_contracts(
    client: TestClient, client_as: Callable[[str], TestClient]
) -> None:
    me = WhoAmI.model_validate_json(client_as("carol").get("/api/whoami").content)
    assert me.user == "carol" and not me.scope.all_jobs
    health = Health.model_validate_json(client.get("/healthz").content)
    assert health.status == "ok" and health.store_schema_version >= 6


def test_the_overview_lists_the_latest_gaps_and_counts_them_all(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    now = utcnow()
    count = OVERVIEW_GAPS + 5
    gaps = [
        {"target": f"http://gpu{i:02d}:9400/metrics", "node": f"gpu{i:02d}",
         "start_ts": now - timedelta(seconds=count - i), "end_ts": now, "reason": "stalled"}
        for i in range(count)
    ]  # fmt: skip
    service.store.append("collection_gaps", pa.Table.from_pylist(gaps, schema=GAP_SCHEMA))
    service.store.flush()
    page = client_as("admin").get("/fragments/overview").text
    assert f"Collection gaps in the last hour: {count}, the latest {OVERVIEW_GAPS} here" in page
    listed = [g["target"] for g in gaps if f"<code>{g['target']}</code>" in page]
    assert listed == [g["target"] for g in gaps[-OVERVIEW_GAPS:]]
    assert len(client_as("admin").get("/api/cluster").json()["gaps"]) == count


def test_the_api_lists_the_latest_gaps_of_a_stalled_hour_and_counts_them_all(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    """A collector stalled by load leaves a gap per target per stall: the health the pages
    and the API keep and send holds the latest HEALTH_GAPS of the hour, never all of them."""
    now = utcnow()
    count = HEALTH_GAPS * 3
    starts = [now - timedelta(seconds=count - i) for i in range(count)]
    targets = [f"http://gpu{i % 128:03d}:9400/metrics" for i in range(count)]
    gaps = [
        {"target": target, "node": target[7:13], "start_ts": start,
         "end_ts": start + timedelta(seconds=1),
         "reason": "not scraped: the collector was not running or stalled"}
        for target, start in zip(targets, starts, strict=True)
    ]  # fmt: skip
    old = {
        **gaps[0],
        "start_ts": now - timedelta(hours=2),
        "end_ts": now - timedelta(hours=1, minutes=1),
    }
    service.store.append("collection_gaps", pa.Table.from_pylist([old, *gaps], schema=GAP_SCHEMA))
    service.store.flush()
    state = ClusterState.model_validate_json(client_as("admin").get("/api/cluster").content)
    assert state.gaps_last_hour == count
    latest = zip(targets[-HEALTH_GAPS:], starts[-HEALTH_GAPS:], strict=True)
    assert [(g.target, g.start_ts) for g in state.gaps] == [(t, iso_z(s)) for t, s in latest]
    page = client_as("admin").get("/fragments/overview").text
    assert f"Collection gaps in the last hour: {count}, the latest {OVERVIEW_GAPS} here" in page
    assert f"lists the latest {HEALTH_GAPS}" in page


def test_a_few_gaps_are_listed_without_a_count(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    now = utcnow()
    gap = {"target": "http://gpu01:9400/metrics", "node": "gpu01", "start_ts": now,
           "end_ts": now, "reason": "scrape failed"}  # fmt: skip
    service.store.append("collection_gaps", pa.Table.from_pylist([gap], schema=GAP_SCHEMA))
    service.store.flush()
    page = client_as("admin").get("/fragments/overview").text
    assert "Collection gaps in the last hour: <code>http://gpu01:9400/metrics</code>" in page


def test_every_visibility_shares_one_collection_health(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    populate(service.store, now=utcnow())
    for name in ("admin", "carol"):  # all jobs; one user's
        assert client_as(name).get("/api/cluster").status_code == 200
    contexts = [
        entry.value
        for key, entry in service.snapshots._entries.items()
        if isinstance(key, tuple) and key[0] == "serve.overview_context"
    ]
    assert len(contexts) == 2
    assert contexts[0]["health"] is contexts[1]["health"]
