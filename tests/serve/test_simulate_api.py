"""The step player and simulator pages and their JSON twins: access, shapes, 422s."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import basic_auth, demo_users

PAGES = ["/step", "/simulate"]
APIS = ["/api/step", "/api/step/expert", "/api/simulate?gpus=8,16&steps=50"]


def _site(path: Path, *, anonymous_diagram: bool, headers: dict[str, str]) -> Iterator[TestClient]:
    settings = Settings(store_path=path, secret_key="k", anonymous_diagram=anonymous_diagram)
    service = Service.open(settings, users=demo_users())
    with TestClient(create_app(service), headers=headers) as client:
        yield client
    service.close()


# The pages read no store: one site per module keeps the suite fast.
@pytest.fixture(scope="module")
def open_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A site that shows the cluster diagram to anonymous visitors."""
    yield from _site(tmp_path_factory.mktemp("open") / "s.duckdb", anonymous_diagram=True,
                     headers={})  # fmt: skip


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An anonymous client of a site with the default (private) diagram setting."""
    yield from _site(tmp_path_factory.mktemp("private") / "s.duckdb", anonymous_diagram=False,
                     headers={})  # fmt: skip


@pytest.fixture(scope="module")
def alice(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A researcher's client of the private site."""
    yield from _site(tmp_path_factory.mktemp("alice") / "s.duckdb", anonymous_diagram=False,
                     headers=basic_auth("alice"))  # fmt: skip


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_login_when_the_diagram_is_private(client: TestClient, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/login?next={path}"


@pytest.mark.parametrize("path", APIS)
def test_apis_need_credentials_when_the_diagram_is_private(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 401
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize("path", PAGES + APIS)
def test_any_logged_in_user_may_use_them(alice: TestClient, path: str) -> None:
    assert alice.get(path).status_code == 200


@pytest.mark.parametrize("path", PAGES + APIS)
def test_anonymous_visitors_may_when_the_diagram_is_public(
    open_site: TestClient, path: str
) -> None:
    assert open_site.get(path).status_code == 200


def test_pages_load_their_scripts_and_no_inline_code(open_site: TestClient) -> None:
    for path, script in (("/step", "/static/js/step.js"), ("/simulate", "/static/js/simulate.js")):
        html = open_site.get(path).text
        assert f'<script src="{script}" defer></script>' in html
        assert '<link rel="stylesheet" href="/static/css/simulate.css">' in html
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script"
        assert 'href="/step"' in html and 'href="/simulate"' in html  # in the navigation
    assert "/static/vendor/uPlot-1.6.32.iife.min.js" in open_site.get("/simulate").text
    for asset in ("/static/js/step.js", "/static/js/simulate.js", "/static/css/simulate.css"):
        assert open_site.get(asset).status_code == 200


def test_step_page_lists_the_clusters_gpus(open_site: TestClient) -> None:
    html = open_site.get("/step").text
    assert html.count('<option value="') == 16 + 3  # 16 GPUs + 3 speeds
    assert "2 — gpu01 · GPU 2</option>" in html


def test_simulate_api_shape(open_site: TestClient) -> None:
    body = open_site.get("/api/simulate", params={"gpus": "8,64", "steps": 200}).json()
    assert set(body) == {"parameters", "fabric", "gpu_hour_price", "currency", "results"}
    assert [r["gpus"] for r in body["results"]] == [8, 64]
    assert body["parameters"]["steps"] == 200
    repeated = open_site.get("/api/simulate?gpus=8&gpus=64&steps=200").json()
    assert repeated["results"] == body["results"]  # same seed, same answer


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("gpus=0", "gpus"),
        ("gpus=8,-4", "gpus"),
        ("steps=0", "steps"),
        ("hiccup_probability=1.5", "hiccup_probability"),
        ("hiccup_seconds=-0.02", "hiccup_seconds"),
        ("backward_seconds=-0.02", "backward_seconds"),
        ("model_parameters=-1", "model_parameters"),
        ("model_parameters=0", "model_parameters"),
        ("jitter_cv=1.5", "jitter_cv"),
        ("straggler_factor=0.2", "straggler_factor"),
        ("gpu_hour_price=-3", "gpu_hour_price"),
        ("gpus=16384&steps=5000", "steps"),
        ("data_load_seconds=0&forward_seconds=0&backward_seconds=0", "compute_seconds"),
        ("nonsense=1", "nonsense"),
    ],
)
def test_simulate_api_rejects_bad_parameters_naming_the_field(
    open_site: TestClient, query: str, field: str
) -> None:
    response = open_site.get(f"/api/simulate?{query}")
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"][0] == "query" and detail["loc"][1] == field
    assert detail["msg"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("straggler_gpu=16", "straggler_gpu"),
        ("straggler_gpu=-1", "straggler_gpu"),
        ("straggler_factor=50", "straggler_factor"),
        ("straggler_phase=allreduce", "straggler_phase"),
        ("model_parameters=-7", "model_parameters"),
    ],
)
def test_step_api_rejects_bad_parameters_naming_the_field(
    open_site: TestClient, query: str, field: str
) -> None:
    response = open_site.get(f"/api/step?{query}")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][1] == field


def test_step_api_is_the_seeds_step(open_site: TestClient) -> None:
    body = open_site.get("/api/step", params={"jitter_cv": 0, "straggler_gpu": 5}).json()
    slow = body["straggler"]
    assert slow["lanes"][5]["slowdown_phases"] == ["backward"]
    ar = body["allreduce"]["seconds"]
    assert slow["step_seconds"] == pytest.approx(0.056 + ar)
    waits = [lane["wait_seconds"] for lane in slow["lanes"] if lane["gpu"] != 5]
    assert waits == pytest.approx([0.020] * 15)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("straggler_gpu=16", "straggler_gpu"),
        ("expert_parallel_ranks=5", "expert_parallel_ranks"),
        ("expert_parallel_ranks=0", "expert_parallel_ranks"),
        ("moe_layers=0", "moe_layers"),
        ("alltoall_bytes=-1", "alltoall_bytes"),
        ("alltoall_overlap=maybe", "alltoall_overlap"),
    ],
)
def test_expert_step_api_rejects_bad_parameters_naming_the_field(
    open_site: TestClient, query: str, field: str
) -> None:
    response = open_site.get(f"/api/step/expert?{query}")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][1] == field


def test_expert_step_api_plays_the_overlapped_all_to_all(open_site: TestClient) -> None:
    on = open_site.get("/api/step/expert", params={"jitter_cv": 0}).json()
    off = open_site.get("/api/step/expert", params={"jitter_cv": 0, "alltoall_overlap": False})
    healthy, serial = on["healthy"], off.json()["healthy"]
    assert healthy["alltoall_hidden_seconds"] > 0 and serial["alltoall_hidden_seconds"] == 0
    assert healthy["step_seconds"] < serial["step_seconds"]
    assert on["parameters"]["moe_layers"] == 4


def test_simulate_api_takes_the_expert_and_pipeline_terms(open_site: TestClient) -> None:
    query = "gpus=16&steps=50&pipeline_stages=4&microbatches=8&alltoall_bytes=1e8"
    point = open_site.get(f"/api/simulate?{query}&expert_parallel_ranks=16").json()["results"][0]
    assert point["pipeline_bubble_ratio"] == pytest.approx(3 / 11)
    assert point["expert_parallel_ranks"] == 16 and point["alltoall_seconds"] > 0
