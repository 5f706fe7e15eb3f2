"""A real Prometheus scrapes hpcscope's /metrics with an admin's credentials, evaluates the
shipped rules, and answers every query of the shipped dashboards."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.deploy.test_grafana_dashboards import concrete, expressions
from tests.support.data import populate
from tests.support.prometheus import prometheus, query
from tests.support.servers import live_server

pytestmark = pytest.mark.prometheus

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "hpcscope-rules.yml"


def test_prometheus_scrapes_hpcscope_and_runs_rules_and_dashboards(
    service: Service, tmp_path: Path
) -> None:
    populate(service.store, now=utcnow())
    shutil.copy(RULES, tmp_path / "hpcscope-rules.yml")
    with live_server(create_app(service)) as base:
        config = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [hpcscope-rules.yml]
scrape_configs:
  - job_name: hpcscope
    metrics_path: /metrics
    basic_auth: {{username: admin, password: admin-demo}}
    static_configs: [{{targets: ["{base.removeprefix("http://")}"]}}]
"""
        with prometheus(config, tmp_path) as url:
            deadline = time.monotonic() + 30
            while not query(url, 'job:hpcscope_job_gpu_sm_active_ratio:avg5m{job_id="102"}'):
                assert time.monotonic() < deadline, "the recording rule never produced a sample"
                time.sleep(0.5)
            # authenticated scrapes of the text format work (one past its 1 s timeout on a loaded
            # machine reads 0 for a moment, and marks the series stale: hence the _over_time)
            up = query(url, 'max_over_time(up{job="hpcscope"}[1m])')
            assert up[0]["value"][1] == "1"
            real = query(url, 'job:hpcscope_job_gpu_sm_active_ratio:avg5m{job_id="102"}')
            assert float(real[0]["value"][1]) == pytest.approx(0.19)
            joined = query(
                url,
                "last_over_time(hpcscope_job_useful_gpu_seconds[1m]) * on(job_id) "
                "group_left(user, account) last_over_time(hpcscope_job_info[1m])",
            )
            assert {(r["metric"]["job_id"], r["metric"]["user"]) for r in joined} == {
                ("101", "alice"),
                ("102", "bob"),
                ("103", "dave"),
            }
            for expr in expressions():  # every dashboard query parses and evaluates
                query(url, concrete(expr))
