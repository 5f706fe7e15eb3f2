"""The same pages from the embedded store, a real Prometheus and a real VictoriaMetrics.

One run of :func:`tests.support.three_backends.three_backends` (about 80 s): the twin, Debian's
``prometheus`` 2.42 (with the engine recording rules: its service reads ``recording_rules``)
and ``victoria-metrics`` 1.79 (no rules: its service reads raw ``query_range``), and three
hpcscope services. Then the JSON documents of the job list (every job's report), the diagram's
values (``/api/cluster``), chargeback and the SLOs are built by each service at the same
instant (a rule evaluation: the rules and the store then hold the same samples) and compared:
every figure within 1 %, every word equal. The finished jobs' reports, chargeback and the SLOs'
real efficiency come from the kept summaries each service wrote from its own backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pytest

from hpcscope.analysis.chargeback.aggregate import GroupBy
from hpcscope.analysis.chargeback.periods import month_of
from hpcscope.model.access import JobScope, Principal, Role
from hpcscope.model.topology import load_topology
from hpcscope.serve.diagram.view import jsonable
from hpcscope.service.backends.prometheus import PrometheusSamples
from hpcscope.service.backends.rule_reads import Coverage
from hpcscope.service.chargeback import reads as chargeback
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.jobs.contracts import JobList
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import bundled_topology
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.report import slo_report
from hpcscope.service.telemetry_rules.engine import TelemetryRules
from hpcscope.store.alerts import alerts as stored_alerts
from tests.support.three_backends import (
    BACKENDS,
    RULE_DELAY,
    RULE_WINDOW,
    SCRAPE_SECONDS,
    ThreeBackends,
    naive,
    three_backends,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e, pytest.mark.xdist_group("engines")]

ADMIN = Principal(name="admin", role=Role.ADMIN)
TOLERANCE = 0.01
#: GPU-hours also agree within this many (3.6 GPU-seconds): a figure that is 0 on one backend
#: (no GPU-second of a waste cause) may be a fraction of a second on another.
HOURS_ABS = 0.001
#: Seconds from the jobs' start to the end of the window the pages are read up to (whole
#: windows: the healthy job ends inside it and is summarised by every service,
#: ``tests/support/three_backends.JOBS``).
READ_AFTER_SECONDS = 6 * RULE_WINDOW
#: Money is GPU-hours at the topology's rate: within 1 % or the cost of :data:`HOURS_ABS`. A
#: lost cost is the billed less the useful, and a difference carries its operands' error: the
#: embedded store weighs each sample by the time to the next (a collector woken 50 ms late under
#: load moves a 30-s job's useful seconds by ~0.3 %, its lost cost by ~1.5 %), the engines
#: count samples.
RATE = load_topology(bundled_topology()).gpu_hour_price
MONEY = {"cost_allocated", "cost_useful", "cost_lost", "cost", "lost_cost"}
#: Figures in units of an SLO's error budget (``1 - objective``): ``(1 - SLI) / budget``. Each
#: side's SLI within 1 % moves them by up to 1 % / budget.
BUDGET_UNITS = {"burn_rate", "max_burn_rate", "budget_remaining_ratio"}
#: Figures that are counts (compared as they are).
EXACT = {"gpus_observed", "gpus_allocated", "idle_gpus", "jobs", "gpus"}
#: From the recording rules, clock reasons are seconds with a slowdown and with a thermal reason,
#: counted by a subquery whose steps fall on whole multiples of the scrape interval, not on the
#: samples: within one sample of the GPU's samples, and the reasons as two groups (thermal
#: 0x20/0x40, another slowdown), not every bit (PromQL has no bitwise OR).
THERMAL = 0x60
#: One sample of a GPU over the run (2 s of the ~50 s a job's GPU is read).
SAMPLE_SHARE = 0.045


@dataclass
class Pages:
    """Each backend's documents, at the same instants."""

    at: datetime
    job_list: dict[str, dict[str, Any]]
    cluster: dict[str, dict[str, Any]]
    chargeback: dict[str, dict[str, Any]]
    slo: dict[str, dict[str, Any]]
    summaries: dict[str, int]
    telemetry: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    rogue: tuple[str, int] | None = None
    coverage: Coverage | None = None
    #: the diagram's instant, and per engine the instant its newest samples are of (its copy's)
    diagram_at: datetime | None = None
    newest_at: dict[str, datetime | None] = field(default_factory=dict)


def _read(backends: ThreeBackends) -> Pages:
    # a window every scraper has stored (VictoriaMetrics shows a point a second after ingesting
    # it) and the rules have evaluated (their delay after its end)
    at = backends.jobs_start + READ_AFTER_SECONDS
    backends.wait_until(at + RULE_DELAY + 2 * SCRAPE_SECONDS)
    now = naive(at)
    pages = Pages(now, {}, {}, {}, {}, {})
    for name, service in backends.services.items():
        pages.summaries[name] = summarise_finished_jobs(
            service.store,
            now=now,
            scrape_interval_seconds=SCRAPE_SECONDS,
            metrics=service.gpu_samples(),
        )
        reports = service.job_reports(ADMIN, now=now)
        pages.job_list[name] = JobList.from_reports(reports).model_dump(mode="json")
        report = chargeback.report(
            service.store,
            ADMIN,
            service.topology,
            service.settings,
            period=month_of(now),
            by=GroupBy.ACCOUNT,
        )
        pages.chargeback[name] = report.model_dump(mode="json")
        config = SloConfig.from_settings(service.settings)
        pages.slo[name] = slo_report(service.store, config, ADMIN, now=now).model_dump(mode="json")
    # the telemetry rules on each backend's GPU inputs, SC-4 after 30 s (not 120: the run is
    # a minute); the alerts each wrote
    for name, service in backends.services.items():
        rules = dict(service.rules)
        rules["SC-4"] = replace(
            rules["SC-4"], thresholds={**rules["SC-4"].thresholds, "min_seconds": 30.0}
        )
        TelemetryRules(service.store, rules, metrics=service.gpu_samples()).evaluate_once(now=now)
        pages.telemetry[name] = sorted(
            (a.rule_id, a.node or "", a.subject or "")
            for a in stored_alerts(service.store, JobScope(all_jobs=True))
            if a.rule_id.startswith(("SC-", "GM-", "RD-", "DP-"))
        )
    pages.rogue = backends.rogue_gpu
    # the probe of ``prometheus_recording_rules: auto`` with the default 7-day lookback
    probe = PrometheusSamples(
        backends.prometheus_url,
        step_seconds=SCRAPE_SECONDS,
        lookback_seconds=7 * 86400.0,
        rule_window_seconds=RULE_WINDOW,
        rule_delay_seconds=RULE_DELAY,
        now=lambda: now,
    )
    try:
        pages.coverage = probe.rules.coverage()
    finally:
        probe.close()
    # the diagram 8 s into a collect interval after the failed job's end (60 s in) and the
    # reads above: every scraper's newest sample is of its page, where two jobs still run
    diagram_at = backends.jobs_start + 7 * RULE_WINDOW + 8.0
    backends.wait_until(diagram_at + 2 * SCRAPE_SECONDS)
    pages.diagram_at = naive(diagram_at)
    for name, service in backends.services.items():
        state = live_state(service, Viewer(ADMIN), now=naive(diagram_at))
        pages.cluster[name] = {"gpus": jsonable(state.gpus), "cluster": jsonable(state.cluster)}
        metrics = service.gpu_samples()
        if isinstance(metrics, PrometheusSamples):
            pages.newest_at[name] = metrics.newest.instant
    return pages


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    with three_backends(tmp_path_factory.mktemp("engines")) as backends:
        yield _read(backends)


def _agree(
    ours: Any, theirs: Any, where: str, problems: list[str], budget: float | None = None
) -> None:
    """Every figure within 1 %, every other value equal (``metrics`` compared by the caller);
    ``budget``: the error budget of the SLO being compared."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        assert set(ours) == set(theirs), f"{where}: keys {set(ours) ^ set(theirs)}"
        if isinstance(ours.get("objective_ratio"), float):
            budget = 1.0 - ours["objective_ratio"]
        for key in ours:
            if key in ("metrics", "generated_at", "sample_ts", "age_seconds", "latest_ts"):
                continue
            _agree(ours[key], theirs[key], f"{where}.{key}", problems, budget)
    elif isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            problems.append(f"{where}: {len(ours)} items vs {len(theirs)}")
            return
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _agree(a, b, f"{where}[{index}]", problems, budget)
    elif where.endswith(".throttle_reasons") and isinstance(ours, int) and isinstance(theirs, int):
        if bool(ours & THERMAL) != bool(theirs & THERMAL):
            problems.append(f"{where}: thermal {ours:#x} vs {theirs:#x}")
    elif (
        where.endswith(".slowdown_share") and isinstance(ours, float) and isinstance(theirs, float)
    ):
        if abs(ours - theirs) > SAMPLE_SHARE:
            problems.append(f"{where}: {ours} vs {theirs}")
    elif (
        isinstance(ours, float | int)
        and isinstance(theirs, float | int)
        and not isinstance(ours, bool)
        and where.rsplit(".", 1)[-1] not in EXACT
    ):
        key = where.rsplit(".", 1)[-1]
        absolute = 1e-9
        if "_hours" in where:
            absolute = HOURS_ABS
        elif key in MONEY:
            absolute = HOURS_ABS * RATE
        elif key in BUDGET_UNITS and budget:
            absolute = TOLERANCE / budget
        if not math.isclose(ours, theirs, rel_tol=TOLERANCE, abs_tol=absolute):
            problems.append(f"{where}: {ours} vs {theirs}")
    elif isinstance(ours, str) and isinstance(theirs, str) and NUMBER.search(ours):
        if not _same_words(ours, theirs):
            problems.append(f"{where}: {ours!r} vs {theirs!r}")
    elif ours != theirs:
        problems.append(f"{where}: {ours!r} vs {theirs!r}")


#: A figure written in a sentence ("98 % reported GPU utilization").
NUMBER = re.compile(r"\d+(?:\.(\d+))?(\s*%)?")


def _same_words(ours: str, theirs: str) -> bool:
    """The same sentence, each figure in it within 1 %, a percentage also within one unit of
    its last written digit (98.49 % and 98.51 % are written 98 % and 99 %)."""
    if NUMBER.sub("#", ours) != NUMBER.sub("#", theirs):
        return False
    for a, b in zip(NUMBER.finditer(ours), NUMBER.finditer(theirs), strict=True):
        percent = a.group(2) is not None
        unit = 10.0 ** -max(len(a.group(1) or ""), len(b.group(1) or "")) if percent else 0.0
        x, y = float(a.group(0).rstrip(" %")), float(b.group(0).rstrip(" %"))
        if not (math.isclose(x, y, rel_tol=TOLERANCE) or abs(x - y) <= unit + 1e-9):
            return False
    return True


def _compare(documents: dict[str, dict[str, Any]], page: str) -> None:
    problems: list[str] = []
    for name in BACKENDS[1:]:
        _agree(documents["embedded"], documents[name], f"{page}[{name}]", problems)
    assert not problems, "\n".join(problems)


def test_the_job_list_and_every_report_agree(pages: Pages) -> None:
    jobs = pages.job_list["embedded"]["jobs"]
    assert len(jobs) == 4 and {j["state"] for j in jobs} >= {"RUNNING", "COMPLETED"}
    assert any(j["source"] == "summary" for j in jobs), "no job was summarised"
    assert pages.summaries["prometheus"] == pages.summaries["embedded"] >= 1
    _compare(pages.job_list, "job list")
    reads = {
        name: {j["metrics"]["read"] for j in doc["jobs"] if j["metrics"] is not None}
        for name, doc in pages.job_list.items()
    }
    assert reads == {
        "embedded": {"store"},
        "prometheus": {"recording_rules"},
        "victoria-metrics": {"query_range"},
    }


def test_the_diagram_values_agree(pages: Pages) -> None:
    gpus = pages.cluster["embedded"]["gpus"]
    assert sum(1 for g in gpus.values() if g["state"] == "active") == 12  # two jobs still run
    # the engines' newest samples are of the instant compared (a copy kept from an earlier
    # read would show an instant up to a scrape interval before it)
    assert pages.newest_at == dict.fromkeys(BACKENDS[1:], pages.diagram_at)
    _compare(pages.cluster, "cluster")


def test_chargeback_agrees(pages: Pages) -> None:
    assert pages.chargeback["embedded"]["total"]["jobs"] >= 1
    _compare(pages.chargeback, "chargeback")


def test_the_slos_agree(pages: Pages) -> None:
    _compare(pages.slo, "slo")


def test_the_telemetry_rules_fire_on_the_same_faults(pages: Pages) -> None:
    fired = pages.telemetry["embedded"]
    assert pages.rogue is not None
    node, _ = pages.rogue
    assert ("SC-4", node) in {(rule, where) for rule, where, _ in fired}, fired
    for name in BACKENDS[1:]:
        assert pages.telemetry[name] == fired, name


def test_the_rules_are_found_from_their_first_evaluation(pages: Pages) -> None:
    # over a 7-day lookback the probe's subquery steps 605 s: rules a minute old fall between
    # two of its points, and are found at their own window (the reads then use them)
    coverage = pages.coverage
    assert coverage is not None and coverage.since is not None and coverage.until is not None
    assert (pages.at - coverage.since).total_seconds() >= READ_AFTER_SECONDS - 2 * RULE_WINDOW
    # the newest evaluation at or before the probe's instant, its window ending the delay before
    assert RULE_DELAY <= (pages.at - coverage.until).total_seconds() <= RULE_DELAY + RULE_WINDOW
