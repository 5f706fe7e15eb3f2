"""Grafana dashboards: generated from code (golden), and linted against hpcscope's conventions.

tests/deploy/test_grafana_queries.py runs every query against a real Prometheus scraping the
twin and hpcscope.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from scripts.grafana import render

from tests.support.promql_names import known_names, metric_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana"
#: Grafana's own variables, and what the tests put in their place.
BUILTINS = {
    "$__rate_interval": "1m",
    "$__range": "5m",
    "$__interval_ms": "5000",
    "$__interval": "5s",
}
#: The product's convention: reported utilization is never shown without real efficiency.
UTILIZATION = re.compile(r"GPU_UTIL|reported_util")
SM_ACTIVE = re.compile(r"SM_ACTIVE|sm_active")
TENSOR_ACTIVE = re.compile(r"TENSOR_ACTIVE|tensor_active")


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS.glob("*.json")}


def concrete(expr: str, values: dict[str, str] | None = None) -> str:
    """``expr`` with Grafana's variables replaced: the built-ins by the test durations, the
    dashboard's (``$job``, ``$node``, ``$account``) by ``values`` or ``.*``."""
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$(\w+)", lambda m: (values or {}).get(m.group(1), ".*"), expr)


def panels() -> list[tuple[str, dict[str, Any]]]:
    return [(name, panel) for name, board in dashboards().items() for panel in board["panels"]]


def expressions() -> list[str]:
    """Every PromQL expression of every panel, variables unreplaced."""
    return [target["expr"] for _, panel in panels() for target in panel["targets"]]


def variable_query(variable: dict[str, Any]) -> tuple[str, str]:
    """(series selector, label) of a ``label_values(selector, label)`` variable."""
    found = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
    assert found, variable["definition"]
    return found.group(1), found.group(2)


def test_committed_json_is_what_the_generator_writes() -> None:
    rendered = render()
    assert set(rendered) == {path.name for path in DASHBOARDS.glob("*.json")}
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text() == text, f"{name}: run scripts/grafana_dashboards.py"


def test_the_four_dashboards_and_their_variables() -> None:
    boards = {board["uid"]: board for board in dashboards().values()}
    assert set(boards) == {"hpcscope-cluster", "hpcscope-job", "hpcscope-team", "hpcscope-security"}
    expected = {
        "hpcscope-cluster": {"datasource", "node"},
        "hpcscope-job": {"datasource", "account", "job", "node"},
        "hpcscope-team": {"datasource", "account"},
        "hpcscope-security": {"datasource", "node"},
    }
    for uid, board in boards.items():
        assert {v["name"] for v in board["templating"]["list"]} == expected[uid], uid


def test_dashboards_follow_the_conventions() -> None:
    uids = [board["uid"] for board in dashboards().values()]
    assert len(uids) == len(set(uids)) and all(len(uid) <= 40 for uid in uids)
    for name, board in dashboards().items():
        assert "__inputs" not in board, name
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), name
        used: set[str] = set()
        for variable in variables.values():
            if variable["type"] == "query":
                assert variable["datasource"]["uid"] == "${datasource}", variable["name"]
                used.update(re.findall(r"\$(\w+)", variable["definition"]))
        for panel in board["panels"]:
            where = f"{name}: {panel['title']}"
            assert panel["datasource"]["uid"] == "${datasource}", where
            assert panel.get("description"), where
            assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", where
                for window in re.findall(r"\brate\([^\[]*\[([^\]]+)\]", target["expr"]):
                    assert window == "$__rate_interval", target["expr"]
                for variable in re.findall(r"\$(\w+)", target["expr"]):
                    if f"${variable}" not in BUILTINS:
                        assert variable in variables, f"{where}: ${variable}"
                        used.add(variable)
        assert used == set(variables) - {"datasource"}, f"{name}: unused variables"


def test_panels_do_not_overlap() -> None:
    for name, board in dashboards().items():
        taken: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, f"{name}: {panel['title']}"
            cells = {
                (x, y)
                for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])
            }
            assert not cells & taken, f"{name}: {panel['title']} overlaps"
            taken |= cells


def test_gpu_utilization_is_never_shown_alone() -> None:
    """Every panel that plots reported utilization plots SM active and tensor active beside it,
    on the same 0-1 scale (percentunit)."""
    checked = 0
    for name, panel in panels():
        exprs = [target["expr"] for target in panel["targets"]]
        if not any(UTILIZATION.search(e) for e in exprs) and "utilization" not in panel["title"]:
            continue
        checked += 1
        where = f"{name}: {panel['title']}"
        assert any(SM_ACTIVE.search(e) and not UTILIZATION.search(e) for e in exprs), where
        assert any(TENSOR_ACTIVE.search(e) for e in exprs), where
        if panel["type"] != "table":
            assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit", where
            for expr in exprs:  # percent from dcgm-exporter is shown as a 0-1 ratio too
                if "DCGM_FI_DEV_GPU_UTIL{" in expr:
                    assert expr.endswith("/ 100"), where
    assert checked >= 8


def test_every_metric_named_is_exported_or_recorded() -> None:
    known = known_names()
    named: set[str] = set()
    for name, panel in panels():
        for target in panel["targets"]:
            found = metric_names(target["expr"])
            assert found, target["expr"]
            assert found <= known, f"{name}: {panel['title']}: unknown {found - known}"
            named |= found
    for board in dashboards().values():
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                selector, _ = variable_query(variable)
                assert metric_names(selector) <= known, variable["definition"]
    # the dashboards read the recording rules, not only raw series
    assert {"hpc_job:DCGM_FI_PROF_SM_ACTIVE:avg5m", "account:DCGM_FI_PROF_SM_ACTIVE:count"} <= named


def test_metric_names_of_an_expression() -> None:
    expr = (
        'sum by (account) (label_replace(x:y:z{a="b"}, "job_id", "$1", "hpc_job", "(.+)") '
        "* on (job_id) group_left (account) max by (job_id, account) (hpcscope_job_info)) "
        "/ rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[$__rate_interval]) * 1e3 > bool 0.5"
    )
    assert metric_names(expr) == {
        "x:y:z",
        "hpcscope_job_info",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    }
    assert metric_names('ALERTS{rule_id!=""} unless on (node) up') == {"ALERTS", "up"}
