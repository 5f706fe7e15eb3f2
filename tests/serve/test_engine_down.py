"""An engine that does not answer: pages say what they cannot show, OPS-1 names the engine.

The engine is a loopback port nothing listens on (a real connection refused), the service the
one a site on ``metrics_backend: prometheus`` runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import JobScope
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.backends.watch import EngineWatch
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.store.alerts import alerts as stored_alerts
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, basic_auth, demo_users
from tests.support.data import populate
from tests.support.servers import free_port


@pytest.fixture
def down(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
        metrics_backend="prometheus",
        prometheus_url=f"http://127.0.0.1:{free_port()}",
        prometheus_retries=0,
        prometheus_recording_rules="never",
    )
    service = Service.open(settings, users=demo_users())
    populate(service.store, now=utcnow())
    yield service
    service.close()


def test_pages_say_the_gpu_figures_cannot_be_shown(down: Service) -> None:
    with TestClient(create_app(down), headers=basic_auth("admin")) as client:
        api = client.get("/api/jobs/101")
        assert api.status_code == 503
        body = api.json()
        assert body["unavailable"] == "gpu_metrics"
        assert "did not answer" in body["detail"] and down.settings.prometheus_url in body["detail"]
        page = client.get("/jobs/101", headers={"accept": "text/html"})
        assert page.status_code == 503
        assert "GPU metrics cannot be shown" in page.text
        assert "0 %" not in page.text  # no figure stands in for the engine
        # what hpcscope keeps itself still answers
        assert client.get("/api/alerts").status_code == 200


def test_an_engine_down_past_the_silence_raises_ops1_and_its_gap(down: Service) -> None:
    clock = [datetime(2026, 3, 1, 12, 0, 0)]
    engine = down.engine()
    assert engine is not None
    watch = EngineWatch(down.store, engine, silence_seconds=30.0, now=lambda: clock[0])
    assert watch.after_cycle() is None  # down, not yet for long
    clock[0] += timedelta(seconds=31)
    alert = watch.after_cycle()
    assert alert is not None and alert.rule_id == "OPS-1"
    assert alert.subject == down.settings.prometheus_url
    assert "not collected for 31 s" in alert.title and "ConnectError" in alert.title
    clock[0] += timedelta(seconds=15)
    assert watch.after_cycle() is None  # one alert per outage
    everyone = JobScope(all_jobs=True)
    assert [a.rule_id for a in stored_alerts(down.store, everyone)] == ["OPS-1"]
