#!/usr/bin/env python3
"""Generate hpcscope's Grafana dashboards (classic JSON) into deploy/grafana/.

Dashboards are code: this script is their source, the JSON files are committed, and a test
fails when they differ from what this script writes. Each dashboard has a fixed ``uid``, a
``datasource`` variable that every panel uses, and ``$__rate_interval`` in every ``rate()``;
no ``__inputs`` block (file provisioning, not import).
Run: ``python scripts/grafana_dashboards.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": True,
    }


def _timeseries(
    panel_id: int,
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    *,
    unit: str,
    grid: tuple[int, int, int, int],
    max_value: float | None = None,
) -> dict[str, Any]:
    x, y, w, h = grid
    defaults: dict[str, Any] = {"unit": unit, "min": 0}
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["mean", "lastNotNull"],
            },
            "tooltip": {"mode": "multi"},
        },
        "targets": [
            _target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)
        ],
    }


def _table(
    panel_id: int, title: str, description: str, expr: str, *, grid: tuple[int, int, int, int]
) -> dict[str, Any]:
    x, y, w, h = grid
    target = _target(expr, "", "A")
    target.update({"instant": True, "range": False, "format": "table"})
    return {
        "id": panel_id,
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [target],
    }


def _variables() -> list[dict[str, Any]]:
    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        {
            "name": "job_id",
            "label": "Job",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": "label_values(hpcscope_job_info, job_id)", "refId": "job_id"},
            "definition": "label_values(hpcscope_job_info, job_id)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
        },
    ]


def jobs_dashboard() -> dict[str, Any]:
    """Reported vs real per job and GPU, stragglers, useful GPU-hours per account."""
    panels = [
        _timeseries(
            1,
            "Reported utilization vs real efficiency, per job",
            "Reported utilization counts any resident kernel (an NCCL kernel spinning "
            "at the barrier included); SM active is what the SMs really did.",
            [
                (
                    'job:hpcscope_job_gpu_reported_util_ratio:avg5m{job_id=~"$job_id"}',
                    "{{job_id}} reported utilization",
                ),
                (
                    'job:hpcscope_job_gpu_sm_active_ratio:avg5m{job_id=~"$job_id"}',
                    "{{job_id}} real (SM active)",
                ),
            ],
            unit="percentunit",
            grid=(0, 0, 24, 9),
            max_value=1,
        ),
        _timeseries(
            2,
            "Real efficiency per GPU",
            "SM active of each GPU of the selected jobs (5-minute mean).",
            [
                (
                    'hpcscope_job_gpu_sm_active_ratio{job_id=~"$job_id"}',
                    "{{job_id}} {{node}} GPU {{gpu}}",
                )
            ],
            unit="percentunit",
            grid=(0, 9, 12, 9),
            max_value=1,
        ),
        _timeseries(
            3,
            "Tensor pipe active per GPU",
            "HMMA pipe busy: the closest hardware proxy for MFU in BF16/FP16.",
            [
                (
                    'hpcscope_job_gpu_tensor_active_ratio{job_id=~"$job_id"}',
                    "{{job_id}} {{node}} GPU {{gpu}}",
                )
            ],
            unit="percentunit",
            grid=(12, 9, 12, 9),
            max_value=1,
        ),
        _table(
            4,
            "Straggler GPUs",
            "GPUs the rest of their job waits for, with the job's user and account.",
            "(hpcscope_job_gpu_straggler == 1) * on(job_id) group_left(user, account) "
            "hpcscope_job_info",
            grid=(0, 18, 12, 8),
        ),
        _timeseries(
            5,
            "Useful GPU-hours per account",
            "Sum over the account's running jobs of sample interval x SM active.",
            [
                (
                    "sum by (account) (hpcscope_job_useful_gpu_seconds * on(job_id) "
                    "group_left(account) hpcscope_job_info) / 3600",
                    "{{account}}",
                )
            ],
            unit="h",
            grid=(12, 18, 12, 8),
        ),
        _timeseries(
            6,
            "GPU power per job (dcgm-exporter)",
            "From the energy counter of dcgm-exporter, labelled by the Slurm prolog.",
            [
                (
                    "sum by (hpc_job) (rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
                    '{hpc_job=~"$job_id", hpc_job!=""}[$__rate_interval])) / 1000',
                    "{{hpc_job}}",
                )
            ],
            unit="watt",
            grid=(0, 26, 12, 8),
        ),
        _timeseries(
            7,
            "Collector health",
            "1 when hpcscope's last scrape of the target succeeded.",
            [("hpcscope_scrape_up", "{{exporter}} {{node}}")],
            unit="none",
            grid=(12, 26, 12, 8),
            max_value=1,
        ),
    ]
    return {
        "uid": "hpcscope-jobs",
        "title": "hpcscope — jobs: reported vs real",
        "tags": ["hpcscope", "gpu", "slurm"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": _variables()},
        "annotations": {"list": []},
        "panels": panels,
    }


DASHBOARDS = {"hpcscope-jobs.json": jobs_dashboard}


def render() -> dict[str, str]:
    """File name -> JSON text, exactly as committed."""
    return {
        name: json.dumps(build(), indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
