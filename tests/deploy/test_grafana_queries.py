"""Every dashboard query against a real Prometheus, and a real VictoriaMetrics with vmalert,
scraping the twin and hpcscope.

The twin plays the demo (straggler, data-starved, healthy, idle and failing jobs on 2 x 8
GPUs) with real-format dcgm-exporter and node_exporter pages and Lustre job_stats; hpcscope's
collector scrapes and reads it and serves /metrics. Debian's ``prometheus`` (2.42), or
``victoria-metrics`` (1.79) with ``vmalert``, scrapes both every second and evaluates the
shipped rule files. Then every variable and every panel query of every dashboard runs: each
must be valid, and each must return data except the few listed in :data:`MAY_BE_EMPTY`, whose
signal the demo does not produce. The recorded figures are checked against what the demo
plays and against hpcscope's own /metrics.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcscope.model.topology import load_topology
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import (
    DcgmSection,
    LustreJobStatsSection,
    NodeSection,
    SlurmSection,
)
from hpcscope.twin.cluster import TwinCluster
from tests.deploy.test_grafana_dashboards import concrete, dashboards, panels, variable_query
from tests.deploy.test_prometheus_rules import VMALERT_REFUSES
from tests.support.collect import collector_for
from tests.support.prometheus import prometheus, query
from tests.support.servers import live_server
from tests.support.victoria_metrics import victoria_metrics, vmalert

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULE_FILES = sorted(p for p in RULES.glob("*.yml") if not p.name.endswith(".test.yml"))
#: Panels whose signal the demo does not play, with the reason; every other panel has data.
MAY_BE_EMPTY = {
    "Finished jobs: allocated and useful GPU-hours (chargeback)": "no job finishes in a minute",
    "Security rules firing in Prometheus": "the demo's attack is a Falco event, not a metric",
    "GPU activity with no job (SC-4)": "the demo's jobs hold all 16 GPUs",
    "GPU memory held with no job (GM-1)": "the demo's jobs hold all 16 GPUs",
    "InfiniBand traffic on nodes with no job (RD-1)": "both nodes run jobs",
}
#: Every core panel answers within this many seconds of the start (16-29 s measured on the
#: shared 2 cores; 49 s and 77 s at load averages of 13 and 27); past it the test fails naming
#: the panels still empty.
DEADLINE_SECONDS = 120.0
LAST = "last_over_time"


def _scrape_config(targets: Path, hpcscope: str) -> str:
    return f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: twin
    file_sd_configs: [{{files: ["{targets}"]}}]
  - job_name: hpcscope  # /metrics reads the store: more than 1 s on a loaded machine
    scrape_interval: 2s
    scrape_timeout: 2s
    basic_auth: {{username: admin, password: admin-demo}}
    static_configs: [{{targets: ["{hpcscope.removeprefix("http://")}"]}}]
"""


@contextlib.contextmanager
def _backend(kind: str, scrape: str, workdir: Path) -> Iterator[str]:
    """The Prometheus API of a backend that scrapes per ``scrape`` and evaluates the rules."""
    if kind == "prometheus":
        workdir.mkdir()
        for rules in RULE_FILES:
            shutil.copy(rules, workdir / rules.name)
        names = [rules.name for rules in RULE_FILES]
        config = scrape.replace(
            "scrape_timeout: 1s}", "scrape_timeout: 1s, evaluation_interval: 1s}"
        )
        with prometheus(f"rule_files: {names}\n{config}", workdir) as url:
            yield url
        return
    accepted = [rules for rules in RULE_FILES if rules.name not in VMALERT_REFUSES]
    with (
        victoria_metrics(scrape, workdir / "vm") as url,
        vmalert(accepted, url, workdir / "vmalert"),
    ):
        yield url


def _value(result: list[dict[str, Any]], **labels: str) -> float:
    found = [r for r in result if all(r["metric"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{labels}: {found}"
    return float(found[0]["value"][1])


def _core_targets() -> list[tuple[str, str]]:
    """Every panel query (the name it is reported by, the query) but :data:`MAY_BE_EMPTY`'s."""
    return [
        (f"{name}: {panel['title']}: {target['expr']}", concrete(target["expr"]))
        for name, panel in panels()
        for target in panel["targets"]
        if panel["title"] not in MAY_BE_EMPTY
    ]


def _empty_targets(url: str, targets: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Those of ``targets`` that return nothing yet (each must also be valid)."""
    return [(named, expr) for named, expr in targets if not query(url, expr)]


def _every_panel_answers(url: str, started: float) -> None:
    """Wait until every core panel answers in one pass; while some are empty, ask only those
    again each second (the full pass every second kept the backend and the twin busier)."""
    every = _core_targets()
    empty = _empty_targets(url, every)
    while empty:
        assert time.monotonic() - started < DEADLINE_SECONDS, "\n".join(n for n, _ in empty)
        time.sleep(1.0)
        empty = _empty_targets(url, empty) or _empty_targets(url, every)


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_every_dashboard_query_answers_on_a_backend_scraping_the_twin(
    kind: str, service: Service, tmp_path: Path
) -> None:
    started = time.monotonic()
    assert set(MAY_BE_EMPTY) <= {panel["title"] for _, panel in panels()}
    topology = load_topology(bundled_topology())
    with TwinCluster(topology, tmp_path / "twin", seed=42, speed=1.0, arrivals_per_hour=0) as twin:
        collector = collector_for(
            service.store,
            Settings(
                scrape_interval_seconds=1.0,
                dcgm=DcgmSection(targets_path=tmp_path / "twin" / "targets.json"),
                node=NodeSection(targets_path=tmp_path / "twin" / "targets.json"),
                slurm=SlurmSection(url=twin.slurmrestd_url, poll_seconds=1.0),
                lustre_job_stats=LustreJobStatsSection(dir=twin.lustre_dir),
            ),
        )
        collector.start()
        try:
            with (
                live_server(create_app(service)) as base,
                _backend(
                    kind, _scrape_config(tmp_path / "twin" / "targets.json", base), tmp_path / kind
                ) as url,
            ):
                _every_panel_answers(url, started)
                ready_seconds = time.monotonic() - started
                for board in dashboards().values():  # every variable lists values
                    for variable in board["templating"]["list"]:
                        if variable["type"] == "query":
                            selector, label = variable_query(variable)
                            grouped = query(url, f"group by ({label}) ({concrete(selector)})")
                            assert grouped, variable["definition"]
                jobs = {job.name: str(job.job_id) for job in twin.scheduler.jobs.values()}
                _check_figures(url, jobs)
        finally:
            collector.stop()
    print(f"{kind}: every core panel answered {ready_seconds:.1f} s after the start")


def _check_figures(url: str, jobs: dict[str, str]) -> None:
    """The recorded figures say what the demo plays (docs/efficiency.md, "The demo's jobs")."""
    straggler, starved, healthy = (
        jobs["llama-7b-pretrain"],
        jobs["bert-finetune"],
        jobs["whisper-train"],
    )
    spread = query(url, "hpc_job:DCGM_FI_PROF_SM_ACTIVE:spread5m")
    assert _value(spread, hpc_job=straggler) > 0.1  # GPU 2 of gpu02 computes, its peers wait
    assert _value(spread, hpc_job=healthy) < 0.1
    clocks = query(url, "hpc_job:DCGM_FI_DEV_SM_CLOCK:spread5m")
    assert _value(clocks, hpc_job=straggler) > _value(clocks, hpc_job=healthy)
    reported = query(url, "hpc_job:DCGM_FI_DEV_GPU_UTIL:ratio_avg5m")
    real = query(url, "hpc_job:DCGM_FI_PROF_SM_ACTIVE:avg5m")
    assert _value(reported, hpc_job=starved) > 0.7 > 0.35 > _value(real, hpc_job=starved)
    assert _value(real, hpc_job=healthy) > 0.6
    # the recorded real efficiency is hpcscope's own figure for the job (both are 5-minute means
    # of the same pages; each scrape of the twin draws its own counter noise). hpcscope's series
    # are read at their last scrape: on a loaded machine a scrape of /metrics can time out, and
    # the series is stale until the next one.
    ours = query(url, f"avg by (job_id) ({LAST}(hpcscope_job_gpu_sm_active_ratio[30s]))")
    for job in (straggler, starved, healthy):
        assert _value(real, hpc_job=job) == pytest.approx(_value(ours, job_id=job), abs=0.03)
    gpus = query(url, f"{LAST}(account:DCGM_FI_PROF_SM_ACTIVE:count[30s])")
    assert _value(gpus, account="speech") == 2  # whisper-train
    assert _value(gpus, account="nlp") == 5  # bert-finetune 4, jupyter-debug 1
    # the straggler job spans both nodes: its AllReduce crosses InfiniBand
    ib = query(url, "hpc_job:node_infiniband_port_data_received_bytes:rate5m")
    assert _value(ib, hpc_job=straggler) > _value(ib, hpc_job=jobs["jupyter-debug"])
    # Lustre: the data-starved job reads the most, the idle notebook nothing
    lustre = query(url, f"{LAST}(hpcscope_job_storage_read_bytes_per_second[30s])")
    assert _value(lustre, job_id=starved) > _value(lustre, job_id=healthy) > 0
    idle = [r for r in lustre if r["metric"]["job_id"] == jobs["jupyter-debug"]]
    assert all(float(r["value"][1]) == 0 for r in idle)
