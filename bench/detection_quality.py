"""Detection quality of the event and telemetry rules: the twin's attack and benign scenarios
replayed through the production pipeline (issue 12 acceptance, T1 tier of the security reference).

Telemetry scenarios (``hpcscope.twin.attacks_telemetry``: InfiniBand counters, DCGM pages,
NVML process lists, Lustre job_stats and changelog) go through the collector's parsers, the
spools and the telemetry rules of ``service/telemetry_rules`` instead
(``tests/support/telemetry_replay.py``); their alerts must name the scenario's GPU too.

Each scenario of ``hpcscope.twin.attacks`` is written as the real tools write it (a Falco
``file_output`` and a Tetragon export, the processes' ``/proc/<pid>/cgroup``), tailed by
``FalcoSource``/``TetragonSource`` into the ``SecurityEventBuffer``, drained by the engine of
``service/alerts/engine.py`` with the rules of ``deploy/rules/*.yaml``, and the alerts read back
from a real DuckDB store whose ``jobs`` hold the scenarios' jobs. One fresh store per scenario.

    .venv/bin/python bench/detection_quality.py

Prints one line per scenario (expected and found per rule), then one JSON line last::

    {"scenarios": N, "recall": r, "benign_high": h, "benign_medium": m,
     "attribution_ok": a, "rules_covered": k, ...}

recall: expected alerts found over expected alerts, a rule counting min(found, expected) per
scenario (and an attack scenario with a rule found more often than expected is reported as
``exact: false``); mttd_seconds: per telemetry rule with a detection-time target, the
seconds from an attack's onset to the first after-cycle run (every 15 s) that raises it
(``tests/support/telemetry_replay.py``: ``detection_delays``);
benign_high / benign_medium: alerts of benign scenarios at HIGH or above /
at MEDIUM; attribution_ok: share of alerts whose node, job, user and account are the
scenario's (GPU: null for every syscall event, and the evidence says so); rules_covered: rule
ids of the reference (GI- excepted) with at least one attack scenario, listed with those not
covered yet.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.support: the replay harnesses

from tests.support.integrity_replay import replay_training  # noqa: E402
from tests.support.telemetry_replay import detection_delays  # noqa: E402
from tests.support.telemetry_replay import replay as replay_telemetry  # noqa: E402

from hpcscope.model.access import JobScope  # noqa: E402
from hpcscope.model.alerts import Alert, Severity  # noqa: E402
from hpcscope.model.schemas import JOB_SCHEMA  # noqa: E402
from hpcscope.service.alerts.engine import SecurityCollection  # noqa: E402
from hpcscope.service.alerts.rules import load_site_rules  # noqa: E402
from hpcscope.service.security.buffer import SecurityEventBuffer  # noqa: E402
from hpcscope.store import Store  # noqa: E402
from hpcscope.store.alerts import alerts  # noqa: E402
from hpcscope.twin import attacks, attacks_telemetry  # noqa: E402
from hpcscope.twin.attacks import CHECKPOINTS, JOBS, Scenario  # noqa: E402
from hpcscope.twin.attacks_node_facts import node_fact_scenarios  # noqa: E402
from hpcscope.twin.attacks_packages import package_scenarios  # noqa: E402
from hpcscope.twin.attacks_sensor import sensor_scenarios  # noqa: E402
from hpcscope.twin.attacks_training import training_scenarios  # noqa: E402

T0 = 1_796_126_400 * 1_000_000_000  # 2026-12-01T12:00:00Z
#: The scenario lists replayed: syscall events, telemetry, the sensor's, the prolog's package
#: inventories, node facts (Xid counts, posture checks), the training recorder's events.
PLAYED = (
    attacks.scenarios,
    attacks_telemetry.scenarios,
    sensor_scenarios,
    package_scenarios,
    node_fact_scenarios,
    training_scenarios,
)
#: Every rule id of the security reference except GI- (gradient injection has its own issue).
REFERENCE_RULES = (
    "SC-1", "SC-2", "SC-3", "SC-4", "SC-5", "SC-6", "SC-7",
    "DP-1", "DP-2", "DP-3", "DP-4", "DP-5",
    "RD-1", "RD-2", "RD-2b", "RD-3", "RD-4", "RD-5", "RD-6", "RD-7",
    "GM-1", "GM-2", "GM-3", "GM-4", "GM-5",
    "CE-1", "CE-2", "CE-3", "CE-4", "CE-5",
    "W-1", "W-2", "W-3", "W-4",
)  # fmt: skip


def replay(s: Scenario, root: Path, delays: dict[str, float | None] | None = None) -> list[Alert]:
    """One scenario through tails, buffer, engine and store; the stored alerts (a telemetry
    scenario through parsers, spools, store and the telemetry rules)."""
    if s.training_events:  # the training recorder's lines, through the integrity spool
        store, spooled = replay_training(s, root, load_site_rules(None))
        try:
            if spooled.errors:
                raise SystemExit(f"{s.name}: lines did not parse: {spooled.errors}")
            return alerts(store, JobScope(all_jobs=True))
        finally:
            store.close()
    if s.evaluate_at_ns is not None:
        rules = load_site_rules(None)
        store, _ = replay_telemetry(s, root, rules)
        try:
            if delays is not None:
                delays.update(detection_delays(store, s, rules))
            return alerts(store, JobScope(all_jobs=True))
        finally:
            store.close()
    store = Store(root / "store.duckdb")
    try:
        rows = [
            dict.fromkeys(JOB_SCHEMA.names)
            | {"job_id": job, "user": user, "account": account, "source": "bench"}
            for job, (user, account) in JOBS.items()
        ]
        store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA))
        store.flush()
        (root / "falco.json").write_text("".join(x + "\n" for x in s.falco))
        (root / "tetragon.log").write_text("".join(x + "\n" for x in s.tetragon))
        collection = SecurityCollection(
            store,
            SecurityEventBuffer(),
            load_site_rules(None),
            checkpoint_roots=[CHECKPOINTS],
            falco_path=root / "falco.json",
            tetragon_path=root / "tetragon.log",
            proc_root=s.proc.write(root / "proc"),
        )
        cycle = collection.collect_once()
        if cycle.errors:
            raise SystemExit(f"{s.name}: lines did not parse: {cycle.errors}")
        return alerts(store, JobScope(all_jobs=True))
    finally:
        store.close()


def attributed(s: Scenario, alert: Alert) -> bool:
    if alert.node != s.node or alert.job_id != s.job_id or alert.gpu != s.gpu:
        return False
    syscall = s.evaluate_at_ns is None  # events name a process, and say the GPU is not known
    if syscall and not any("GPU not known" in e.summary for e in alert.evidence):
        return False
    if s.job_id is None:
        return alert.account is None
    return (alert.user, alert.account) == JOBS[s.job_id]


def main() -> None:
    played = [s for scenarios in PLAYED for s in scenarios(T0)]
    expected_total = found_total = 0
    benign_high = benign_medium = 0
    attributed_ok = alerts_total = 0
    exact = True
    covered: set[str] = set()
    per_rule: Counter[str] = Counter()
    mttd: dict[str, list[float | None]] = {}
    for s in played:
        delays: dict[str, float | None] = {}
        with tempfile.TemporaryDirectory() as directory:
            found = replay(s, Path(directory), delays)
        for rule, delay in delays.items():
            mttd.setdefault(rule, []).append(delay)
        counts = Counter(a.rule_id for a in found)
        alerts_total += len(found)
        attributed_ok += sum(attributed(s, a) for a in found)
        if s.benign:
            benign_high += sum(a.severity >= Severity.HIGH for a in found)
            benign_medium += sum(a.severity == Severity.MEDIUM for a in found)
        else:
            covered |= set(s.expected)
            for rule, want in s.expected.items():
                expected_total += want
                found_total += min(counts.get(rule, 0), want)
                per_rule[rule] += min(counts.get(rule, 0), want)
            exact = exact and dict(counts) == s.expected
            for rule, severity in s.severities.items():
                top = max((a.severity for a in found if a.rule_id == rule), default=None)
                exact = exact and top is Severity[severity]
        want_text = ", ".join(f"{k} x{v}" for k, v in sorted(s.expected.items())) or "quiet"
        got_text = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "quiet"
        kind = "benign" if s.benign else "attack"
        print(f"{kind:6s} {s.name:30s} expected {want_text:28s} found {got_text}")
    not_covered = [r for r in REFERENCE_RULES if r not in covered]
    print(f"rules covered: {', '.join(sorted(covered))}")
    print(f"rules not covered yet: {', '.join(not_covered)}")
    result = {
        "scenarios": len(played),
        "recall": round(found_total / expected_total, 4) if expected_total else None,
        "benign_high": benign_high,
        "benign_medium": benign_medium,
        "attribution_ok": round(attributed_ok / alerts_total, 4) if alerts_total else None,
        "rules_covered": len(covered),
        "rules_total": len(REFERENCE_RULES),
        "exact_counts": exact,
        "covered": sorted(covered),
        "mttd_seconds": {
            rule: max(v) if None not in v else None  # type: ignore[type-var]
            for rule, v in sorted(mttd.items())
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
