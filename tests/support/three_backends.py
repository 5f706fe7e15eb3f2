"""One twin, three hpcscope services on three metrics backends, for the equivalence tests.

The twin serves real dcgm-exporter pages on loopback. Three scrapers scrape them with the same
interval: hpcscope's own collector (the ``embedded`` service's store), Debian's ``prometheus``
(2.42, with the engine recording rules evaluated every :data:`RULE_WINDOW` seconds, each over
the window ending :data:`RULE_DELAY` seconds before it) and
Debian's ``victoria-metrics`` (1.79, no rules: its service reads raw samples). The two engine
services run the collector as a site on an engine does: the scheduler only, no dcgm scrape.

Like a real dcgm-exporter (``-c``), the twin collects a page once per :data:`COLLECT_SECONDS`
and serves it to every scrape in between, so the three scrapers see the same samples; its
collect intervals are lined up with the rules' windows (Prometheus' evaluation instants, read
from ``/api/v1/rules``, less the delay), so that a rule window holds exactly the pages an
embedded read up to its end holds. Jobs are submitted once every scraper scrapes steadily, on
a window's end (the twin shows a job's label from its start, and the windows up to a later end
then hold each scraper's samples of it, whatever the scraper's phase).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest

from hpcscope.model.topology import load_topology
from hpcscope.service.backends.engine_rules import RuleNames, engine_rules_yaml
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import (
    DcgmSection,
    JobMappingSection,
    NodeSection,
    SlurmSection,
)
from hpcscope.twin.cluster import TwinCluster
from hpcscope.twin.workloads import Profile
from tests.support.collect import collector_for
from tests.support.prometheus import prometheus
from tests.support.victoria_metrics import victoria_metrics

SCRAPE_SECONDS = 2.0
RULE_WINDOW = 10
#: The rules' delay: not a multiple of the window, so that a reader mixing the two is caught.
RULE_DELAY = 4
COLLECT_SECONDS = 10.0
NAMES = RuleNames(RULE_WINDOW, RULE_DELAY)
BACKENDS = ("embedded", "prometheus", "victoria-metrics")

#: The jobs, submitted at once: the demo's straggler and data-starved jobs (running through the
#: window), a healthy job that ends inside it (at 30 s: summarised by every service when the
#: pages are read, 60 s in, the prometheus service's settling being the longest: three scrape
#: intervals, a rule window, its delay and two scrape intervals, 24 s) and a job that dies of
#: an Xid (at 30 + 30 s, the twin's hang after a fault: summarised by none); one GPU stays free
#: for a miner (SC-4's fault). The jobs start and end on the twin's page boundaries: every
#: scraper then holds the same number of a job's samples whatever its phase (a job ending
#: between two pages counts a sample at its end for a scraper whose phase falls on it).
JOBS: tuple[dict[str, object], ...] = (
    {"name": "llama-7b-pretrain", "user": "alice", "account": "vision",
     "profile": Profile.STRAGGLER, "gpus": 8, "duration_seconds": 3600.0, "spread_nodes": 2,
     "straggler_gpu": 6},
    {"name": "bert-finetune", "user": "bob", "account": "nlp", "profile": Profile.DATA_STARVED,
     "gpus": 4, "duration_seconds": 3600.0, "nodelist": ("gpu02",)},
    {"name": "whisper-train", "user": "dave", "account": "speech", "profile": Profile.HEALTHY,
     "gpus": 2, "duration_seconds": 30.0},
    {"name": "vit-sweep-17", "user": "alice", "account": "vision", "profile": Profile.FAILED,
     "gpus": 1, "duration_seconds": 3600.0, "fail_after_seconds": 30.0},
)  # fmt: skip


def _scrape_config(targets: Path, rules: Path | None) -> str:
    rule_files = ""
    evaluation = ""
    if rules is not None:
        rule_files = f"rule_files: ['{rules}']\n"
        evaluation = f", evaluation_interval: {RULE_WINDOW}s"
    return f"""
global: {{scrape_interval: {SCRAPE_SECONDS:g}s, scrape_timeout: {SCRAPE_SECONDS:g}s{evaluation}}}
{rule_files}scrape_configs:
  - job_name: dcgm
    file_sd_configs: [{{files: ["{targets}"]}}]
    relabel_configs:
      - {{source_labels: [exporter], regex: dcgm, action: keep}}
"""


def epoch(at: datetime) -> float:
    return at.replace(tzinfo=UTC).timestamp()


def naive(epoch_seconds: float) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).replace(tzinfo=None)


def instant(url: str, query: str, at: float | None = None) -> list[dict[str, object]]:
    params = {"query": query} if at is None else {"query": query, "time": f"{at:.3f}"}
    body = httpx2.get(f"{url}/api/v1/query", params=params, timeout=10).json()
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


@dataclass
class ThreeBackends:
    """The running twin and the three services (see the module docstring)."""

    twin: TwinCluster
    services: dict[str, Service]
    prometheus_url: str
    vm_url: str
    window_phase: float
    """Seconds after a multiple of :data:`RULE_WINDOW` at which the rules' windows end (the
    twin's pages change): Prometheus' evaluation phase less :data:`RULE_DELAY`."""
    rogue_gpu: tuple[str, int] | None = None
    """The GPU busy with no job (SC-4's fault), from the jobs' start."""
    jobs_start: float = 0.0
    """When the jobs were submitted (epoch seconds): a window's end."""

    def window_end(self, before: float) -> float:
        """The newest end of a rule window at or before ``before`` (epoch seconds); the rules
        evaluate it :data:`RULE_DELAY` seconds later."""
        k = (before - self.window_phase) // RULE_WINDOW
        return k * RULE_WINDOW + self.window_phase

    def wait_until(self, at: float) -> None:
        time.sleep(max(0.0, at - time.time()))


def _service(tmp: Path, name: str, prometheus_url: str, vm_url: str, twin: TwinCluster) -> Service:
    engine = {
        "embedded": {},
        "prometheus": {
            "metrics_backend": "prometheus",
            "prometheus_url": prometheus_url,
            "prometheus_recording_rules": "always",
            "prometheus_rule_interval_seconds": RULE_WINDOW,
            "prometheus_rule_delay_seconds": RULE_DELAY,
        },
        "victoria-metrics": {
            "metrics_backend": "prometheus",
            "prometheus_url": vm_url,
            "prometheus_recording_rules": "never",
        },
    }[name]
    targets = tmp / "twin" / "targets.json"
    settings = Settings(
        store_path=tmp / f"{name}.duckdb",
        # the same sections for the three: the engines' services do not register the dcgm
        # scrape (metrics_backend: prometheus); the embedded one also reads the prolog's
        # mapping files, as a site's does: allocations end when a job's mapping line does
        dcgm=DcgmSection(targets_path=targets),
        node=NodeSection(targets_path=targets),
        slurm=SlurmSection(url=twin.slurmrestd_url, poll_seconds=SCRAPE_SECONDS),
        job_mapping=JobMappingSection(dir=tmp / "twin" / "nodes" if name == "embedded" else None),
        scrape_interval_seconds=SCRAPE_SECONDS,
        secret_key="equivalence",
        password_hash_cost_log2=4,
        **engine,  # type: ignore[arg-type]
    )
    return Service.open(settings, users=UserDirectory.demo(hash_cost_log2=4))


def _rule_phase(url: str) -> float:
    """Where in its interval Prometheus evaluates the engine rules (from /api/v1/rules)."""
    deadline = time.monotonic() + 3 * RULE_WINDOW
    while time.monotonic() < deadline:
        groups = httpx2.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        for group in groups:
            last = group.get("lastEvaluation", "")
            if group["name"] == "hpcscope-engine-gpu" and not last.startswith("0001"):
                whole, _, fraction = last.rstrip("Z").partition(".")
                at = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
                at += float(f"0.{fraction or 0}")
                return at % RULE_WINDOW
        time.sleep(0.5)
    pytest.fail("Prometheus did not evaluate the engine rules")


def _steady(backends: ThreeBackends) -> None:
    """Wait until every scraper has scraped every dcgm target."""
    embedded = backends.services["embedded"].store
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ok = embedded.query(
            "SELECT count(DISTINCT target) AS n FROM scrapes WHERE exporter = 'dcgm' AND ok"
        ).to_pylist()[0]["n"]
        engines = [
            len(instant(url, 'up{job="dcgm"} == 1'))
            for url in (backends.prometheus_url, backends.vm_url)
        ]
        if ok >= 2 and min(engines) >= 2:
            return
        time.sleep(0.5)
    pytest.fail("the scrapers did not all reach the twin's targets in 30 s")


@contextlib.contextmanager
def three_backends(tmp: Path) -> Iterator[ThreeBackends]:
    """Start the twin, the engines and the services; submit :data:`JOBS` once every scraper
    scrapes steadily; stop everything after the block."""
    topology = load_topology(bundled_topology())
    rules = tmp / "hpcscope-engine-rules.yml"
    rules.write_text(
        engine_rules_yaml(
            scrape_interval_seconds=int(SCRAPE_SECONDS),
            window_seconds=RULE_WINDOW,
            delay_seconds=RULE_DELAY,
        )
    )
    twin = TwinCluster(
        topology,
        tmp / "twin",
        seed=42,
        speed=1.0,
        scenario="empty",
        arrivals_per_hour=0,
        dcgm_collect_interval_seconds=COLLECT_SECONDS,
    )
    targets = tmp / "twin" / "targets.json"
    (tmp / "prometheus").mkdir(parents=True)
    with (
        twin,
        prometheus(_scrape_config(targets, rules), tmp / "prometheus") as prometheus_url,
        victoria_metrics(_scrape_config(targets, None), tmp / "vm") as vm_url,
    ):
        phase = (_rule_phase(prometheus_url) - RULE_DELAY) % RULE_WINDOW
        twin.set_dcgm_collect_phase(phase)
        services = {name: _service(tmp, name, prometheus_url, vm_url, twin) for name in BACKENDS}
        collectors = [
            collector_for(service.store, service.settings) for service in services.values()
        ]
        backends = ThreeBackends(twin, services, prometheus_url, vm_url, phase)
        try:
            for collector in collectors:
                collector.start()
            _steady(backends)
            # the jobs start on a window's end: a read up to a later one then holds the same
            # number of every scraper's samples, whatever its phase
            start = backends.window_end(time.time()) + RULE_WINDOW
            backends.wait_until(start)
            with twin._lock:
                for spec in JOBS:
                    twin.scheduler.submit(**spec)  # type: ignore[arg-type]
                twin.scheduler.tick(twin.now())
                held = {a for job in twin.scheduler.jobs.values() for a in job.allocation}
                gpus = sorted((n.name, g.index) for n in topology.nodes for g in n.gpus)
                # SC-4's fault: a GPU busy with no job mapped to it (a miner)
                rogue = next(k for k in gpus if k not in held)
                twin.unmapped_work[rogue] = Profile.HEALTHY
                backends.rogue_gpu = rogue
                backends.jobs_start = start
            yield backends
        finally:
            for collector in collectors:
                collector.stop()
            for service in services.values():
                service.close()
