"""The chargeback page, its JSON twins, the CSV export and the account report: figures of the
jobs in :mod:`tests.support.chargeback_data`, a golden CSV, bad parameters, and the access
matrix: for alice, bob, dave (researchers), carol (team lead of vision and nlp) and admin, every
route shows exactly the jobs in scope (0 cross-tenant reads, by figures and by tokens)."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.service.core import Service
from tests.support.chargeback_data import JOB_TOKENS, JOBS, write_chargeback_jobs

GOLDEN = Path(__file__).parent / "golden" / "chargeback-account-2026-11.csv"

VISIBLE = {
    "admin": set(JOBS),
    "alice": {"201", "204"},
    "bob": {"202"},
    "dave": {"203"},
    "carol": {"201", "202", "204"},
}


def _november_gpu_hours(job_ids: set[str]) -> float:
    """Allocated GPU-hours of these jobs inside November (204 has half of its 4 h there)."""
    hours = {"201": 4 * 2.0, "202": 4 * 1.0, "203": 2 * 1.0, "204": 8 * 2.0}
    return sum(hours[j] for j in job_ids)


@pytest.fixture
def as_user(
    service: Service, client_as: Callable[[str], TestClient]
) -> Callable[[str], TestClient]:
    write_chargeback_jobs(service.store)
    return client_as


def test_figures_by_account(as_user: Callable[[str], TestClient]) -> None:
    body = as_user("admin").get("/api/chargeback?by=account&period=2026-11").json()
    rows = {r["key"]: r for r in body["rows"]}
    assert body["start"] == "2026-11-01T00:00:00Z" and body["end"] == "2026-12-01T00:00:00Z"
    assert math.isclose(rows["vision"]["allocated_gpu_hours"], 24.0)
    assert math.isclose(rows["nlp"]["allocated_gpu_hours"], 4.0)
    waste = body["total"]["waste_gpu_hours"]
    assert math.isclose(waste["failed_job"], 16 * 0.3, rel_tol=1e-9)  # 204's November half
    assert math.isclose(waste["data_starved"], 4 * 0.81, rel_tol=1e-9)
    assert math.isclose(waste["idle_allocation"], 2.0)
    assert math.isclose(waste["low_efficiency"], 8 * 0.2, rel_tol=1e-9)
    assert math.isclose(sum(waste.values()), body["total"]["lost_gpu_hours"])
    # the topology's price (no per-model rate configured): 2.5 USD a GPU-hour on 2x8-h100
    assert math.isclose(body["total"]["cost"], 30.0 * body["default_gpu_hour_rate"])
    october = as_user("admin").get("/api/chargeback?period=2026-10").json()
    assert math.isclose(october["total"]["allocated_gpu_hours"], 16.0)  # 204's other half


def test_csv_export_is_golden(as_user: Callable[[str], TestClient]) -> None:
    response = as_user("admin").get("/api/chargeback.csv?by=account&period=2026-11")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert 'filename="chargeback-account-2026-11.csv"' in response.headers["content-disposition"]
    assert response.text == GOLDEN.read_text(encoding="utf-8").replace("\n", "\r\n")
    lines = list(csv.DictReader(io.StringIO(response.text)))
    assert [line["key"] for line in lines][-1] == "(total)"


def test_bad_parameters_are_400_naming_them(as_user: Callable[[str], TestClient]) -> None:
    admin = as_user("admin")
    for url in (
        "/api/chargeback?period=2026-13",
        "/api/chargeback?by=cluster",
        "/api/chargeback.csv?period=soon",
        "/api/chargeback/trend?period=2026-02-30",
    ):
        response = admin.get(url)
        assert response.status_code == 400, url
        assert "period" in response.json()["detail"] or "by" in response.json()["detail"]
    page = admin.get("/chargeback?period=nope")
    assert page.status_code == 400 and "nope" in page.text


def _forbidden(user: str) -> set[str]:
    hidden = {t for j in set(JOBS) - VISIBLE[user] for t in JOB_TOKENS[j]}
    return hidden - {t for j in VISIBLE[user] for t in JOB_TOKENS[j]} - {user}


def _urls(user: str) -> list[str]:
    accounts = sorted({JOBS[j][1] for j in VISIBLE[user]})
    urls = [
        "/chargeback?period=2026-11",
        "/chargeback?period=2026-11&view=decision",
        "/chargeback?by=user&period=2026-11",
        "/chargeback?by=partition&period=2026-11&view=decision",
        "/api/chargeback/trend?by=user&period=2026-12&months=3",
        "/api/chargeback/trend?by=account&period=2026-12&months=3",
    ]
    for by in ("account", "user", "partition"):
        urls += [
            f"/api/chargeback?by={by}&period=2026-11",
            f"/api/chargeback.csv?by={by}&period=2026-11",
        ]
    urls += [f"/chargeback/report?account={a}&period=2026-11" for a in accounts]
    urls += [f"/api/chargeback.csv?by=user&period=2026-11&account={a}" for a in accounts]
    return urls


def test_access_matrix(as_user: Callable[[str], TestClient]) -> None:
    leaks = 0
    checked = 0
    for user, visible in VISIBLE.items():
        client = as_user(user)
        forbidden = _forbidden(user)
        pattern = re.compile(r"\b(" + "|".join(sorted(forbidden)) + r")\b") if forbidden else None
        for url in _urls(user):
            response = client.get(url)
            assert response.status_code == 200, (user, url, response.status_code)
            checked += 1
            if pattern is not None and (found := pattern.findall(response.text)):
                leaks += 1
                pytest.fail(f"{user} reads {sorted(set(found))} at {url}")
        # by figures: the totals are exactly the jobs in scope, through every grouping
        for by in ("account", "user", "partition"):
            body = client.get(f"/api/chargeback?by={by}&period=2026-11").json()
            assert math.isclose(body["total"]["allocated_gpu_hours"], _november_gpu_hours(visible))
            assert body["total"]["jobs"] == len(visible)
        trend = client.get("/api/chargeback/trend?by=user&period=2026-11&months=2").json()
        assert math.isclose(
            sum(trend["total"]["allocated_gpu_hours"]),
            _november_gpu_hours(visible) + (16.0 if "204" in visible else 0.0),
        )
        # asking for another team's account gives nothing of it
        for account in {"vision", "nlp", "speech"}:
            mine = {j for j in visible if JOBS[j][1] == account}
            body = client.get(f"/api/chargeback?by=user&period=2026-11&account={account}").json()
            assert body["total"]["jobs"] == len(mine), (user, account)
            report = client.get(f"/chargeback/report?account={account}&period=2026-11")
            assert report.status_code == 200
            if not mine:
                assert "No finished job of this account" in report.text
    assert leaks == 0 and checked > 50


def test_anonymous_gets_nothing(client: TestClient, service: Service) -> None:
    write_chargeback_jobs(service.store)
    for url in ("/api/chargeback", "/api/chargeback.csv", "/api/chargeback/trend"):
        response = client.get(url)
        assert response.status_code == 401, url
    page = client.get("/chargeback", follow_redirects=False)
    assert page.status_code in (302, 303, 307) and "/login" in page.headers["location"]
    report = client.get("/chargeback/report?account=vision", follow_redirects=False)
    assert report.status_code in (302, 303, 307)


def test_metrics_carry_allocated_and_useful_per_account(
    as_user: Callable[[str], TestClient],
) -> None:
    text = as_user("admin").get("/metrics").text
    found = dict(
        re.findall(
            r'^hpcscope_account_(allocated|useful)_gpu_seconds_total\{account="vision"\} (\S+)$',
            text,
            re.M,
        )
    )
    whole = as_user("admin").get("/api/chargeback?by=account&period=2026").json()
    vision = next(r for r in whole["rows"] if r["key"] == "vision")
    assert math.isclose(float(found["allocated"]), vision["allocated_gpu_hours"] * 3600)
    assert math.isclose(float(found["useful"]), vision["useful_gpu_hours"] * 3600)


def test_top_jobs_are_the_largest_losses_in_scope(as_user: Callable[[str], TestClient]) -> None:
    body = as_user("admin").get("/api/chargeback?period=2026-11").json()
    top = [(j["job_id"], j["main_cause"]) for j in body["top_jobs"]]
    # 204: 16 GPU-h x 30 % lost in November; 202: 4 x 81 %; 203: 2 idle; 201: 8 x 20 %
    assert top == [
        ("204", "failed_job"),
        ("202", "data_starved"),
        ("203", "idle_allocation"),
        ("201", "low_efficiency"),
    ]
    page = as_user("carol").get("/chargeback/report?account=vision&period=2026-11").text
    assert '<a href="/jobs/204">204</a>' in page and "/jobs/202" not in page
