"""The API load bench and the soak ask for every GET route the app has (``bench/api_routes.py``):
a route added to a router without a bench entry, or a bench entry left behind by a renamed
route, fails here."""

from __future__ import annotations

import re

from bench.api_routes import MIX, ROUTES
from fastapi.routing import APIRoute

from hpcscope.serve.app import ROUTERS

_PARAMETER = re.compile(r"\{[^}]+\}")


def _shape(path: str) -> str:
    return _PARAMETER.sub("{}", path.partition("?")[0])


def test_the_bench_asks_for_every_get_route_and_only_those() -> None:
    app_paths = {
        _shape(route.path)
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and route.methods and "GET" in route.methods
    } | {"/api/openapi.json"}
    bench_paths = {_shape(route.path) for route in ROUTES}
    assert app_paths - bench_paths == set(), "GET routes the bench does not ask for"
    assert bench_paths - app_paths == set(), "bench routes the app does not have"


def test_the_mix_is_the_kept_routes() -> None:
    names = [route.name for route in ROUTES]
    assert len(names) == len(set(names))
    assert {name for name, _ in MIX} == {route.name for route in ROUTES if route.kept}
    assert all(weight > 0 for _, weight in MIX)
