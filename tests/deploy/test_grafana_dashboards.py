"""Grafana dashboards: generated from code, linted, and every query evaluated by Prometheus."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "grafana_dashboards", ROOT / "scripts" / "grafana_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS.glob("*.json")}


def expressions() -> list[str]:
    """Every PromQL expression of every panel and variable."""
    found: list[str] = []
    for board in dashboards().values():
        for panel in board["panels"]:
            found.extend(target["expr"] for target in panel["targets"])
    return found


def test_committed_json_is_what_the_generator_writes() -> None:
    rendered = _generator().render()
    assert set(rendered) == {path.name for path in DASHBOARDS.glob("*.json")}
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text() == text, f"{name}: run scripts/grafana_dashboards.py"


def test_dashboards_follow_the_conventions() -> None:
    uids = [board["uid"] for board in dashboards().values()]
    assert len(uids) == len(set(uids)) and all(len(uid) <= 40 for uid in uids)
    for name, board in dashboards().items():
        assert "__inputs" not in board, name
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel.get("description"), panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"
                for window in re.findall(r"rate\([^\[]*\[([^\]]+)\]", target["expr"]):
                    assert window == "$__rate_interval", target["expr"]
