"""pytest-benchmark: the cluster diagram at 1,024 GPUs (128 x 8 H100).

``make bench`` (or ``.venv/bin/pytest bench/bench_diagram.py -q --benchmark-only``). What the
first render of ``/diagram`` costs on the server, piece by piece: the pure layout, the live
state (store queries and the per-GPU verdicts), and the whole page through the app. The browser
side (first contentful paint under 1 s) is measured by
``tests/serve/test_browser_diagram.py::test_first_render_of_1024_gpus_under_one_second``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pytest_benchmark.fixture import BenchmarkFixture
from tests.support.fleet import write_scaled_fleet

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.diagram.layout import layout_diagram
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings, bundled_topology


@pytest.fixture(scope="module")
def scale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    path: Path = tmp_path_factory.mktemp("diagram") / "scale.duckdb"
    settings = Settings(
        store_path=path, secret_key="bench", topology_path=bundled_topology("128x8-h100")
    )
    service = Service.open(settings, users=UserDirectory.demo())
    write_scaled_fleet(service.store, [n.name for n in service.topology.nodes], now=utcnow())
    yield service
    service.close()


def test_layout_1024_gpus(benchmark: BenchmarkFixture, scale: Service) -> None:
    layout = benchmark(layout_diagram, scale.topology, scale.catalog)
    assert len(layout.shapes) > 1024


def test_live_state_1024_gpus(benchmark: BenchmarkFixture, scale: Service) -> None:
    viewer = Viewer(scale.principal("admin"))
    state = benchmark(live_state, scale, viewer)
    assert len(state.gpus) == 1024


def test_page_1024_gpus(benchmark: BenchmarkFixture, scale: Service) -> None:
    with TestClient(create_app(scale)) as client:
        client.post("/login", data={"username": "admin", "password": "admin-demo", "next": "/"})

        def page() -> int:
            response = client.get("/diagram")
            assert response.status_code == 200
            return len(response.content)

        assert benchmark(page) > 100_000
