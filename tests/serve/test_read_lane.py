"""The read lane answers what the routes answer, for every kind of viewer (issue 17 part 4).

One service with the fleet of ``tests/support/fleet.py``, two apps on it: with the read lane
(``serve/read_lane.py``) and without. Every request goes to the app without the lane first
(it computes the snapshots), then to the one with it; status, headers and body must be the
same, for each researcher, the team lead, the admin, an anonymous visitor with the site's
anonymous diagram on and off, a forged cookie and HTTP Basic, on every path the lane names
(jobs visible or not, a job that does not exist) and a few it does not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import Response

from hpcscope.model.access import TokenScope
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import LANE_ROUTES, ROUTERS, create_app
from hpcscope.serve.read_lane import LaneRoute, ReadLane
from hpcscope.serve.routes import diagram, jobs
from hpcscope.service.core import Service
from hpcscope.service.identity.tokens import ApiTokens
from hpcscope.service.snapshots import Snapshots
from tests.conftest import DEMO_PASSWORDS, basic_auth
from tests.support.fleet import JOBS, write_fleet

JOB_IDS = [job[0] for job in JOBS]
LANE_PATHS = [
    "/api/jobs",
    "/diagram",
    "/api/diagram/state",
    *(f"/jobs/{job}" for job in [*JOB_IDS, "999999"]),
    *(f"/api/jobs/{job}" for job in [*JOB_IDS, "999999"]),
    *(f"/api/jobs/{job}/timeseries" for job in [*JOB_IDS, "999999"]),
]
#: Paths near the lane's that it must leave to the app.
OTHER_PATHS = [
    "/api/jobs?x=1",
    "/diagram?mode=threats",
    "/api/diagram/state?node=gpu01",
    "/jobs/",
    "/api/jobs/",
    f"/api/jobs/{JOB_IDS[0]}/alerts",
    "/jobs",
]
USERS = ["admin", "carol", "alice", "bob", "dave"]


def _lane(app: object) -> ReadLane:
    layer: Any = getattr(app, "middleware_stack", None)
    while layer is not None and not isinstance(layer, ReadLane):
        layer = getattr(layer, "app", None)
    assert isinstance(layer, ReadLane), "the lane is in the app's middleware stack"
    return layer


@pytest.fixture
def apps(service: Service) -> Iterator[tuple[TestClient, TestClient]]:
    write_fleet(service.store, now=utcnow())
    origin = {"Origin": "http://testserver"}
    with (
        TestClient(create_app(service, read_lane=False), headers=origin) as plain,
        TestClient(create_app(service), headers=origin) as laned,
    ):
        yield plain, laned


def _cookie(client: TestClient, user: str) -> str:
    response = client.post(
        "/login",
        data={"username": user, "password": DEMO_PASSWORDS[user], "next": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    return response.headers["set-cookie"].split(";", 1)[0]


def _same_answers(
    plain: TestClient, laned: TestClient, headers: dict[str, str], paths: list[str]
) -> None:
    for path in paths:
        first = plain.get(path, headers=headers, follow_redirects=False)
        etag = first.headers.get("etag")
        for extra in [{}, {"If-None-Match": etag}] if etag else [{}]:
            want = plain.get(path, headers=headers | extra, follow_redirects=False)
            got = laned.get(path, headers=headers | extra, follow_redirects=False)
            assert (got.status_code, got.headers.items(), got.content) == (
                want.status_code,
                want.headers.items(),
                want.content,
            ), path


def test_each_logged_in_user_gets_what_the_routes_answer(
    apps: tuple[TestClient, TestClient],
) -> None:
    """One service for all, the admin first: the snapshots then hold answers of wider scopes
    than the next users', which the lane must not hand them."""
    plain, laned = apps
    for user in USERS:
        before = _lane(laned.app).answered
        _same_answers(plain, laned, {"Cookie": _cookie(plain, user)}, LANE_PATHS + OTHER_PATHS)
        assert _lane(laned.app).answered > before, user


@pytest.mark.parametrize("anonymous_diagram", [False, True])
def test_an_anonymous_visitor_gets_what_the_routes_answer(
    apps: tuple[TestClient, TestClient], service: Service, anonymous_diagram: bool
) -> None:
    service.settings.anonymous_diagram = anonymous_diagram
    plain, laned = apps
    _same_answers(plain, laned, {}, LANE_PATHS + OTHER_PATHS)
    answered = _lane(laned.app).answered
    # with the site setting the diagram and its poll are the visitor's; jobs never are
    assert answered == (
        4 if anonymous_diagram else 0
    )  # the page and the poll, each with and without its ETag


def test_forged_cookies_and_wrong_passwords_are_left_to_the_app(
    apps: tuple[TestClient, TestClient],
) -> None:
    plain, laned = apps
    cookie = _cookie(plain, "admin")
    forged = cookie[:-3] + ("AAA" if not cookie.endswith("AAA") else "BBB")
    _same_answers(plain, laned, {"Cookie": forged}, LANE_PATHS)
    _same_answers(plain, laned, basic_auth("alice", "wrong"), ["/api/jobs"])
    _same_answers(plain, laned, {"Authorization": "Bearer hps_" + "x" * 40}, ["/api/jobs"])
    assert _lane(laned.app).answered == 0


def test_basic_credentials_and_tokens_verified_once_are_answered_on_the_lane(
    apps: tuple[TestClient, TestClient], service: Service
) -> None:
    """The first request checks the secret in a worker (the app's path); the next ones find it
    verified in the last minute and are the lane's, with the same answers."""
    plain, laned = apps
    _same_answers(plain, laned, basic_auth("alice"), LANE_PATHS)
    by_basic = _lane(laned.app).answered
    assert by_basic > 0
    alice = service.principal("alice")
    assert alice is not None
    token = ApiTokens(service.store).create(
        alice, scope=TokenScope.READ, label="lane", expires_days=1, now=utcnow()
    )
    bearer = {"Authorization": f"Bearer {token.secret}"}
    for client in (plain, laned):  # each app records the token's first use: a store write
        assert client.get("/api/jobs", headers=bearer).status_code == 200
    service.store.flush()  # committed: no new generation between the two apps' answers
    _same_answers(plain, laned, bearer, [p for p in LANE_PATHS if p.startswith("/api/")])
    assert _lane(laned.app).answered > by_basic


def test_every_lane_route_is_a_get_route_of_its_router() -> None:
    """A lane entry names a route the app has, so a renamed route cannot leave it behind."""
    paths = {
        route.path
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and route.methods and "GET" in route.methods
    }
    assert {route.path for route in LANE_ROUTES} <= paths
    assert {route.path for route in [*jobs.LANE_ROUTES, *diagram.LANE_ROUTES]} <= paths


@pytest.mark.parametrize(
    "path",
    [
        "/api/alerts?severity=bogus",
        "/api/alerts?state=open&state=resolved",
        "/api/alerts?nonsense=1",
        "/api/chargeback?by=colour",
        "/api/chargeback?period=2026-13",
        "/chargeback?by=colour",
        "/api/access?path=relative/path",
        "/api/access?path=/lustre&limit=0",
        "/api/access?path=/lustre&limit=abc",
        "/api/access",
        "/access?path=/lustre&limit=99999999",
    ],
)
def test_a_query_the_lane_does_not_take_is_the_apps(
    apps: tuple[TestClient, TestClient], path: str
) -> None:
    """Bad, repeated or unknown parameters: the lane hands the request on and the app's
    validation answers it, the same either way."""
    plain, laned = apps
    _same_answers(plain, laned, {"Cookie": _cookie(plain, "carol")}, [path])
    assert _lane(laned.app).answered == 0


def _nothing(request: Request, parameter: str) -> Response:
    return Response()


def test_a_lane_route_has_one_parameter_at_most_last_or_before_one_segment() -> None:
    assert LaneRoute("/api/jobs", _nothing).prefix is None
    assert LaneRoute("/jobs/{job_id}", _nothing).prefix == "/jobs/"
    suffixed = LaneRoute("/api/jobs/{job_id}/timeseries", _nothing)
    assert (suffixed.prefix, suffixed.suffix) == ("/api/jobs/", "/timeseries")
    for path in ["/jobs/{a}/{b}", "/jobs/{a}/x/y", "/jobs/{a}x", "/jobs/{a}/", "/f/{p:path}"]:
        with pytest.raises(ValueError, match="one str parameter at most"):
            _ = LaneRoute(path, _nothing).prefix


def test_a_parameter_before_a_segment_is_matched_as_the_framework_does() -> None:
    def echo(request: Request, parameter: str) -> Response:
        return Response(parameter)

    lane = ReadLane(
        Response(),
        routes=[
            LaneRoute("/a/{x}", lambda r, p: Response("a:" + p)),
            LaneRoute("/a/{x}/t", echo),
            LaneRoute("/b", _nothing),
        ],
    )
    route = lane._route
    assert route("/a/9/t", False) is not None and route("/a/9/t", False)[1] == "9"  # type: ignore[index]
    assert route("/a/9", False) is not None and route("/a/9", False)[1] == "9"  # type: ignore[index]
    for path in ["/a//t", "/a/9/u", "/a/9/t/", "/x/9/t", "/t", "/a/t", "/b/9/t"]:
        found = route(path, False)
        assert found is None or found[0] is not echo, path
    assert route("/a/9/t", True) is None  # a query string: the app answers


def test_a_path_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        ReadLane(Response(), routes=[LaneRoute("/a/{x}", _nothing), LaneRoute("/a/{y}", _nothing)])


def test_a_value_another_request_computes_is_waited_for_on_the_loop() -> None:
    """A lane request that misses a value being computed elsewhere waits for it on the event
    loop and answers it itself: the app (a worker thread) is not asked."""
    snapshots = Snapshots(lambda: 0)
    started, release = threading.Event(), threading.Event()

    def slow() -> bytes:
        started.set()
        release.wait(10)
        return b"computed"

    asked: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        asked.append(scope["path"])
        await Response(b"the app")(scope, receive, send)

    lane = ReadLane(app, routes=[LaneRoute("/v", lambda r, p: Response(snapshots.get("v", slow)))])
    computing = threading.Thread(target=snapshots.get, args=("v", slow))
    computing.start()
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    answered = TestClient(lane).get("/v")  # no lifespan: the app answers only requests
    computing.join(10)
    assert (answered.content, asked, lane.answered) == (b"computed", [], 1)
    assert snapshots.computations == 1
