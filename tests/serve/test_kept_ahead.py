"""The SLO report of a scope that is read is kept ahead by the collector's hook: its readers
find it current, computed on the keeper's thread, not in a request."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.kept import REPORT_EVERY_SECONDS, AheadKeeper
from hpcscope.service.core import Service
from tests.support.data import populate


def test_a_read_slo_report_is_recomputed_ahead_and_read_without_computing(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    populate(service.store, now=utcnow())
    service.snapshots.publish()
    carol = client_as("carol")
    first = carol.get("/api/slo")
    assert first.status_code == 200
    keeper = AheadKeeper(
        service.snapshots, lead_seconds=REPORT_EVERY_SECONDS, start=lambda work: work()
    )
    keeper.after_cycle()  # due within the lead: recomputed now, on the keeper's thread
    assert keeper.computed == 1
    computed = service.snapshots.computations
    again = carol.get("/api/slo")
    assert service.snapshots.computations == computed
    assert again.json()["scope"] == first.json()["scope"] == "accounts"
    keeper.stop()
    keeper.after_cycle()  # stopped: no pass any more
    assert keeper.computed == 1
