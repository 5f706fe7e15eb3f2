"""The diagram's live state is reused between polls only while it is current (issue 17 part 4).

Every open diagram page polls ``/api/diagram/state``; the server computes the state once per
data generation for every viewer who sees the same (``Viewer.visibility``) and hands it to the
next polls (the service's snapshots, ``service/snapshots.py``, whose bounds in time are tested
in ``tests/service/test_snapshots.py``). These tests count the computations (a counting wrapper
around the real ``live_state``) and check what the polls show.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import Principal, Role
from hpcscope.model.alerts import VECTOR_NAMES, Vector
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.routes import diagram as diagram_routes
from hpcscope.service.core import Service
from hpcscope.service.diagram import live
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.identity.users import (
    DEMO_LOGINS,
    UserDirectory,
    UserRecord,
    hash_password,
)
from hpcscope.service.source_settings import FalcoSection
from tests.serve.test_diagram_access import logged_in
from tests.support.alerts import open_escape_alert
from tests.support.fleet import write_fleet


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The viewer names ``live_state`` was computed for, in order."""
    seen: list[str | None] = []
    real = live_state

    def counting(service: Service, viewer: Any, **kwargs: Any) -> Any:
        seen.append(viewer.name)
        return real(service, viewer, **kwargs)

    monkeypatch.setattr(diagram_routes, "live_state", counting)  # a zoomed view's
    monkeypatch.setattr(live, "live_state", counting)  # the whole cluster's, shared
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


def test_the_page_and_its_polls_share_one_state_and_a_match_is_304(
    service: Service, computations: list[str | None]
) -> None:
    write_fleet(service.store, now=utcnow())
    alice = logged_in(service, "alice")
    assert alice.get("/diagram").status_code == 200
    first = alice.get("/api/diagram/state")
    again = alice.get("/api/diagram/state", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert computations == ["alice"]


def test_one_state_for_one_visibility_one_page_per_principal(
    service: Service, computations: list[str | None]
) -> None:
    write_fleet(service.store, now=utcnow())
    admin = Principal(name="admin", role=Role.ADMIN)
    other = Principal(name="root2", role=Role.ADMIN)
    records = [
        UserRecord(d.name, d.role, hash_password(d.password, cost_log2=4), d.accounts, ())
        for d in DEMO_LOGINS
    ]
    records.append(UserRecord(other.name, Role.ADMIN, hash_password("x", cost_log2=4), (), ()))
    service.users = UserDirectory(records, hash_cost_log2=4)
    first = logged_in(service, "admin")
    second = TestClient(create_app(service), headers={"Origin": "http://testserver"})
    second.__enter__()
    login = {"username": "root2", "password": "x", "next": "/"}
    assert second.post("/login", data=login, follow_redirects=False).status_code == 303
    assert Viewer(admin).visibility() == Viewer(other).visibility()
    one, two = first.get("/diagram").text, second.get("/diagram").text
    assert computations == ["admin"]  # the same state: admins see alike
    assert "admin · admin" in one and "root2 · admin" in two  # each their own page
    assert _poll(first)["elements"] == _poll(second)["elements"]


def test_a_view_of_changed_alert_counts_replaces_the_one_before(
    service: Service, computations: list[str | None]
) -> None:
    """Each change of the open-alert counts is a new view of the diagram, which replaces the
    one before: a view kept per count left the one before, and the live state it holds, in
    memory until the entry budget pushed them out (the soak's growth)."""
    service.settings = service.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    write_fleet(service.store, now=utcnow())
    admin = logged_in(service, "admin")
    node = service.topology.nodes[0].name
    sizes, counts = [], []
    for opened in range(1, 4):
        open_escape_alert(service.store, node=node, subject=f"pid {opened}")
        vector = f"vector-{VECTOR_NAMES[Vector.CONTAINER_ESCAPE]}"
        counts.append(_poll(admin)["elements"][vector]["lines"][1])
        sizes.append(len(service.snapshots))
    assert counts == ["1 open", "2 open", "3 open"]
    assert sizes[0] == sizes[1] == sizes[2]
