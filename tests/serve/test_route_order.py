"""The routers' order is free: no path of one router's routes matches another router's route.

``serve/app.py`` lists the most read routers first (they are matched on every request, in
order); that is only safe while no route of a router answers a path meant for another.
"""

from __future__ import annotations

import re

import pytest
from starlette.routing import BaseRoute, Match

from hpcscope.serve.app import ROUTERS

# values for path parameters: plain, numeric, and words other routes use as literal segments
FILLS = ("x", "1", "12345", "compare", "new", "state", "live", "api", "page")


def _paths(route: BaseRoute) -> list[str]:
    path = str(getattr(route, "path", ""))
    return [re.sub(r"\{[^}]+\}", fill, path) for fill in FILLS]


def _methods(route: BaseRoute) -> list[str]:
    return sorted(getattr(route, "methods", None) or {"GET"})


def _full_match(route: BaseRoute, path: str, method: str) -> bool:
    scope = {"type": "http", "path": path, "method": method, "root_path": ""}
    match, _ = route.matches(scope)
    return match == Match.FULL


def test_each_route_answers_its_own_sample_paths() -> None:
    """The check below can find a clash: the sample paths reach the routes they come from."""
    routes = [route for router in ROUTERS for route in router.routes]
    assert len(routes) > 50
    for route in routes:
        assert all(_full_match(route, path, _methods(route)[0]) for path in _paths(route))


@pytest.mark.parametrize("index", range(len(ROUTERS)))
def test_no_route_of_another_router_answers_a_path_of_this_one(index: int) -> None:
    clashes = [
        (method, path, str(getattr(other, "path", other)))
        for route in ROUTERS[index].routes
        for path in _paths(route)
        for method in _methods(route)
        for j, router in enumerate(ROUTERS)
        if j != index
        for other in router.routes
        if _full_match(other, path, method)
    ]
    assert clashes == []
