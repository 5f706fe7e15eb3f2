"""``/api/cluster``, ``/api/whoami`` and ``/healthz`` emit what their contracts describe."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.contracts import ClusterState, Health, WhoAmI
from hpcscope.service.core import Service
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
