"""SC-5: distributions installed into a site-packages during a job (``analysis/alerts/packages``),
the rule over real-format Tetragon lines, and the twin's scenarios through the production
pipeline (tail, buffer, engine, DuckDB store)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.analysis.alerts.events import EventRules
from hpcscope.analysis.alerts.packages import (
    InstalledFile,
    installed_file,
    lock_entry,
    lock_set,
    normalise,
    why_high,
)
from hpcscope.analysis.registry import registry
from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Severity
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.alerts.falco_meaning import load_falco_meaning, meaning_path
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.store import Store
from hpcscope.store.alerts import alerts
from hpcscope.twin import attacks_packages
from hpcscope.twin.attacks import CHECKPOINTS, JOBS, SECOND_NS, Scenario
from hpcscope.twin.security_events import Proc, ProcTree, file_access, tetragon_exec

T0 = 1_796_126_400 * SECOND_NS
RULES = load_site_rules(None)
OWNERS = {job: JobOwner(user, account) for job, (user, account) in JOBS.items()}
SITE = "/opt/venv/lib/python3.11/site-packages"

names = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,8}([._][A-Za-z0-9]{1,5}){0,2}", fullmatch=True)
versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}(\.post[0-9]|rc[0-9])?", fullmatch=True)

MEANING = load_falco_meaning(meaning_path(None))


def test_paths_an_installer_writes_are_recognised() -> None:
    found = installed_file(f"{SITE}/Typing_Extensions-4.12.2.dist-info/RECORD")
    assert found == InstalledFile(
        SITE, "typing-extensions", "4.12.2", "dist-info", "Typing_Extensions-4.12.2.dist-info"
    )
    assert found.subject == "typing-extensions 4.12.2"
    pth = installed_file("/usr/lib/python3/dist-packages/distutils-precedence.pth")
    assert pth is not None and (pth.kind, pth.name, pth.version) == (
        "pth", "distutils-precedence", None
    )  # fmt: skip
    assert pth.subject == "/usr/lib/python3/dist-packages/distutils-precedence.pth"


@pytest.mark.parametrize(
    "path",
    [
        f"{SITE}/torch/__pycache__/functional.cpython-311.pyc",
        f"{SITE}/torch/weights/model.pth",  # weights below a package, not a .pth hook
        f"{SITE}/foo-1.0.dist-info",  # the directory itself: no file of it written yet
        f"{CHECKPOINTS}/run/step-1/model.pth",
        "/home/u/site-packages.pth",
        f"{SITE}/.pth",
        f"{SITE}/not-a-dist-info/RECORD",
    ],
)
def test_other_paths_are_not_installs(path: str) -> None:
    assert installed_file(path) is None


@given(names, versions, st.sampled_from(["METADATA", "RECORD", "INSTALLER", "licenses/LICENSE"]))
def test_any_wheel_dist_info_file_names_its_distribution(
    name: str, version: str, file: str
) -> None:
    found = installed_file(f"{SITE}/{name.replace('.', '_')}-{version}.dist-info/{file}")
    assert found is not None
    assert (found.name, found.version, found.site_dir) == (normalise(name), version, SITE)


@given(names, versions)
def test_severity_follows_the_lockfile_and_the_known_bad_list(name: str, version: str) -> None:
    found = InstalledFile(SITE, normalise(name), version, "dist-info", f"{name}-{version}")
    locked = lock_set([f"{name.upper()}=={version}"])  # names compare normalised
    assert why_high(found, locked, frozenset()) is None
    assert "not in the lockfile" in (why_high(found, frozenset(), frozenset()) or "")
    assert "known-bad" in (why_high(found, locked, locked) or "")
    assert "not in the lockfile" in (
        why_high(found, lock_set([f"{name}=={version}9"]), frozenset()) or ""
    )


def test_lock_entries_parse_or_are_rejected_at_start() -> None:
    assert lock_entry("Torch == 2.6.0") == ("torch", "2.6.0")
    assert lock_entry("torch>=2.6") is None and lock_entry("torch") is None
    sc5 = replace(RULES["SC-5"], lists={"lockfile": ("torch>=2.6",), "known_bad": ()})
    assert registry().list_errors({**RULES, "SC-5": sc5}) == [
        (sc5, "SC-5: lockfile entry 'torch>=2.6' is not name==version")
    ]
    assert registry().list_errors(RULES) == []


def _alerts(lines: list[str], tree: ProcTree, tmp_path: Path) -> list:  # type: ignore[type-arg]
    tree.write(tmp_path / "proc")
    parsed = parse_tetragon_lines(
        [x.encode() for x in lines], source="t.log", jobs=ExecJobCache(proc_root=tmp_path / "proc")
    )
    assert not parsed.errors
    engine = EventRules(RULES, checkpoint_roots=[CHECKPOINTS], meaning=MEANING)
    return engine.evaluate(pa.table({}), parsed.table, owners=OWNERS).alerts


def test_only_job_processes_writing_raise(tmp_path: Path) -> None:
    tree = ProcTree()
    admin = tree.add(Proc("gpu01", 900, 0, "/usr/bin/python3", "-m pip install x", T0), None)
    job = tree.add(Proc("gpu01", 901, 1000, "/usr/bin/python3", "-m pip", T0), "4410001")
    dist = f"{SITE}/requests-2.32.3.dist-info/METADATA"
    lines = [
        tetragon_exec(admin),
        tetragon_exec(job),
        file_access(admin, f"{SITE}/evil-1.0.dist-info/METADATA", 2, time_ns=T0 + SECOND_NS),
        file_access(job, dist, 4, time_ns=T0 + 2 * SECOND_NS),  # a read: importlib.metadata
        file_access(job, dist, 2, time_ns=T0 + 3 * SECOND_NS),
    ]
    [alert] = _alerts(lines, tree, tmp_path)
    assert (alert.rule_id, alert.severity, alert.subject) == (
        "SC-5",
        Severity.MEDIUM,
        "requests 2.32.3",
    )
    assert (alert.node, alert.job_id, alert.user, alert.account) == (
        "gpu01",
        "4410001",
        "alice",
        "vision",
    )


@pytest.mark.parametrize("make", attacks_packages.PACKAGE_SCENARIOS, ids=lambda m: m.__name__)
def test_scenarios_through_the_pipeline(make: object, tmp_path: Path) -> None:
    s: Scenario = make(T0)  # type: ignore[operator]
    store = Store(tmp_path / "store.duckdb")
    try:
        rows = [
            dict.fromkeys(JOB_SCHEMA.names)
            | {"job_id": job, "user": user, "account": account, "source": "test"}
            for job, (user, account) in JOBS.items()
        ]
        store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA))
        store.flush()
        (tmp_path / "falco.json").write_text("")
        (tmp_path / "tetragon.log").write_text("".join(x + "\n" for x in s.tetragon))
        collection = SecurityCollection(
            store,
            SecurityEventBuffer(),
            RULES,
            checkpoint_roots=[CHECKPOINTS],
            falco_path=tmp_path / "falco.json",
            tetragon_path=tmp_path / "tetragon.log",
            proc_root=s.proc.write(tmp_path / "proc"),
        )
        assert not collection.collect_once().errors
        found = alerts(store, JobScope(all_jobs=True))
    finally:
        store.close()
    assert dict(Counter(a.rule_id for a in found)) == s.expected
    for rule, severity in s.severities.items():
        assert max(a.severity for a in found if a.rule_id == rule) is Severity[severity]
    for alert in found:
        assert (alert.node, alert.job_id, alert.gpu) == (s.node, s.job_id, None)
        assert (alert.user, alert.account) == JOBS[str(s.job_id)]
        assert all("installed during the job" in e.summary for e in alert.evidence)
