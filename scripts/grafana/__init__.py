"""hpcscope's Grafana dashboards, as code: the source of the JSON under deploy/grafana/.

The JSON files are committed, and a test fails when they differ from what :func:`render`
writes. Four dashboards (docs/grafana.md): cluster, job, team (Slurm account) and security.
Each has a fixed ``uid``, a ``datasource`` variable that every panel uses, templated ``node`` /
``account`` / ``job`` variables where it filters on them, a unit and a description on every
panel, and ``$__rate_interval`` in every ``rate()``; no ``__inputs`` block (file provisioning,
not import). Reported GPU utilization is never shown alone: every panel that plots it plots SM
active and tensor active beside it. Most panels read the recording rules of
deploy/prometheus/hpcscope-recording-rules.yml.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from scripts.grafana.cluster import cluster_dashboard
from scripts.grafana.job import job_dashboard
from scripts.grafana.security import security_dashboard
from scripts.grafana.team import team_dashboard

DASHBOARDS: dict[str, Callable[[], dict[str, Any]]] = {
    "hpcscope-cluster.json": cluster_dashboard,
    "hpcscope-job.json": job_dashboard,
    "hpcscope-team.json": team_dashboard,
    "hpcscope-security.json": security_dashboard,
}


def render() -> dict[str, str]:
    """File name -> JSON text, exactly as committed."""
    return {
        name: json.dumps(build(), indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }
