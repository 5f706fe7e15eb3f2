"""Panel, variable and dashboard builders shared by hpcscope's Grafana dashboards."""

from __future__ import annotations

from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
Grid = tuple[int, int, int, int]
Targets = list[tuple[str, str]]

#: GPU-hours over the dashboard's range from a per-second series sampled at $__interval.
HOURS_OVER_RANGE = "sum_over_time({expr}[$__range:$__interval]) * $__interval_ms / 3600000"
NO_JOB = 'hpc_job=~"|0"'


def target(expr: str, legend: str, ref: str, *, instant: bool = False) -> dict[str, Any]:
    built: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": not instant,
    }
    if instant:
        built.update({"instant": True, "format": "table"})
    return built


def panel(
    kind: str,
    panel_id: int,
    title: str,
    description: str,
    targets: Targets,
    *,
    unit: str,
    grid: Grid,
    max_value: float | None = None,
) -> dict[str, Any]:
    """A ``timeseries``, ``stat`` or ``table`` panel (tables and stats query instantly)."""
    x, y, w, h = grid
    defaults: dict[str, Any] = {"unit": unit}
    if kind != "table":
        defaults["min"] = 0
    if max_value is not None:
        defaults["max"] = max_value
    instant = kind == "table"
    built: dict[str, Any] = {
        "id": panel_id,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            target(expr, legend, chr(ord("A") + i), instant=instant)
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    if kind == "timeseries":
        built["options"] = {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["mean", "lastNotNull"],
            },
            "tooltip": {"mode": "multi"},
        }
    elif kind == "stat":
        built["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    else:
        built["transformations"] = [{"id": "merge", "options": {}}]
    return built


def variable(name: str, label: str, metric: str, label_name: str) -> dict[str, Any]:
    definition = f"label_values({metric}, {label_name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": definition, "refId": name},
        "definition": definition,
        "refresh": 2,
        "sort": 1,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "hide": 0,
    }


DATASOURCE_VARIABLE = {
    "name": "datasource",
    "label": "Prometheus",
    "type": "datasource",
    "query": "prometheus",
    "current": {},
    "hide": 0,
}
NODE = variable("node", "Node", "DCGM_FI_DEV_GPU_UTIL", "node")
ACCOUNT = variable("account", "Account", "hpcscope_job_info", "account")
JOB = variable("job", "Job", 'hpcscope_job_info{account=~"$account"}', "job_id")


def dashboard(
    uid: str, title: str, tags: list[str], variables: list[dict[str, Any]], panels: list[Any]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["hpcscope", *tags],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [DATASOURCE_VARIABLE, *variables]},
        "annotations": {"list": []},
        "panels": panels,
    }


def reported_vs_real(level: str, selector: str, legend: str) -> Targets:
    """Reported utilization, SM active and tensor active of a job / node recording level."""
    return [
        (f"{level}:DCGM_FI_DEV_GPU_UTIL:ratio_avg5m{selector}", f"{legend} reported utilization"),
        (f"{level}:DCGM_FI_PROF_SM_ACTIVE:avg5m{selector}", f"{legend} real (SM active)"),
        (f"{level}:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:avg5m{selector}", f"{legend} tensor active"),
    ]


def per_gpu_count(numerator: str, selector: str, by: str) -> str:
    """A sum_avg1m record over the GPUs of the same level: the GPU-weighted mean."""
    return (
        f"sum by ({by}) ({numerator}{selector}) / "
        f"sum by ({by}) ({by}:DCGM_FI_PROF_SM_ACTIVE:count{selector})"
    )
