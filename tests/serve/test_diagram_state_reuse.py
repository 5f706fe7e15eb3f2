"""The diagram's live state is reused between polls only while it is current (issue 17 part 4).

Every open diagram page polls ``/api/diagram/state``; the server computes one viewer's state
once and hands it to the next polls until a store write commits or
``STATE_REUSE_SECONDS`` pass (set to an hour here, but by the test of that bound, so that the
machine's speed decides nothing). These tests count the computations (a counting wrapper around
the real ``live_state``) and check what the polls show.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.routes import diagram as diagram_routes
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import live_state
from tests.serve.test_diagram_access import logged_in
from tests.support.fleet import write_fleet


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The viewer names ``live_state`` was computed for, in order."""
    seen: list[str | None] = []
    real = live_state

    def counting(service: Service, viewer: Any, **kwargs: Any) -> Any:
        seen.append(viewer.name)
        return real(service, viewer, **kwargs)

    monkeypatch.setattr(diagram_routes, "live_state", counting)
    # an hour: on a loaded machine two polls may be over a second apart (one test sets 0)
    monkeypatch.setattr(diagram_routes, "STATE_REUSE_SECONDS", 3600.0)
    return seen


def _poll(client: TestClient) -> dict[str, Any]:
    response = client.get("/api/diagram/state")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_a_commit_counts(service: Service) -> None:
    before = service.store.writes_committed
    write_fleet(service.store, now=utcnow())
    assert service.store.writes_committed > before


def test_polls_without_a_write_share_one_computation(
    service: Service, computations: list[str | None]
) -> None:
    write_fleet(service.store, now=utcnow())
    alice = logged_in(service, "alice")
    first, second = _poll(alice), _poll(alice)
    assert computations == ["alice"]
    assert first == second


def test_a_write_makes_the_next_poll_current(
    service: Service, computations: list[str | None]
) -> None:
    admin = logged_in(service, "admin")
    empty = _poll(admin)
    assert empty["summary"].startswith("No GPU of the 16 has reported")
    write_fleet(service.store, now=utcnow())
    filled = _poll(admin)
    assert computations == ["admin", "admin"]
    assert not filled["summary"].startswith("No GPU")


def test_viewers_never_share_a_state(service: Service, computations: list[str | None]) -> None:
    write_fleet(service.store, now=utcnow())
    alice, bob = logged_in(service, "alice"), logged_in(service, "bob")
    assert _poll(alice) != _poll(bob)  # their own jobs' GPUs differ
    _poll(alice)
    _poll(bob)
    assert computations == ["alice", "bob"]


def test_reuse_is_bounded_in_time(
    service: Service, computations: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fleet(service.store, now=utcnow())
    monkeypatch.setattr(diagram_routes, "STATE_REUSE_SECONDS", 0.0)
    alice = logged_in(service, "alice")
    _poll(alice)
    _poll(alice)
    assert computations == ["alice", "alice"]
