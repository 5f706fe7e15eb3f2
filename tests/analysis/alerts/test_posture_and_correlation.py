"""Posture rules against the shipped version lists, and W-2's windows, on hand-made inputs."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.analysis.alerts.correlation import CorrelationRules, Egress
from hpcscope.analysis.alerts.posture import (
    FLAGS,
    NodePosture,
    posture_alerts,
    postures_from_facts,
    release,
)
from hpcscope.analysis.registry import registry
from hpcscope.model.alerts import Severity
from hpcscope.service.alerts.rules import RuleFileError, load_rules, load_site_rules

RULES = load_site_rules(None)
T0 = datetime(2026, 12, 1, 12, 0, 0)


def _posture(**kwargs: object) -> NodePosture:
    return NodePosture(node="gpu01", checked_at=T0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({"torch": "2.5.1+cu121"}, {("SC-7", "torch 2.5.1+cu121")}),
        ({"torch": "2.5.0"}, {("SC-7", "torch 2.5.0")}),
        ({"torch": "2.6.0"}, set()),
        ({"runc": "1.1.11", "nvidia-container-toolkit": "1.17.8"}, {("CE-5", "runc 1.1.11")}),
        ({"nvidia-container-toolkit": "1.17.7-1"}, {("CE-5", "nvidia-container-toolkit 1.17.7-1")}),
        ({"runc": "1.2.8"}, set()),
        ({"runc": "unknown"}, {("CE-5", "runc unknown")}),  # never reported as safe
    ],
)
def test_versions_against_the_shipped_lists(
    versions: dict[str, str], expected: set[tuple[str, str]]
) -> None:
    found = posture_alerts(_posture(versions=versions), RULES)
    assert {(a.rule_id, a.subject) for a in found} == expected
    assert all(a.node == "gpu01" and a.severity is Severity.MEDIUM for a in found)


def test_flags_raise_their_rule() -> None:
    posture = _posture(pip_extra_index_url=True, setuid_apptainer=True,
                       epilog_without_gpu_reset=True)  # fmt: skip
    found = {(a.rule_id, a.subject) for a in posture_alerts(posture, RULES)}
    assert found == {("SC-7", "pip_extra_index_url"), ("CE-5", "setuid_apptainer"),
                     ("GM-5", "epilog_without_gpu_reset")}  # fmt: skip
    assert posture_alerts(_posture(), RULES) == []


@given(st.lists(st.integers(0, 99), min_size=1, max_size=4), st.sampled_from(["", "+cu121", "-1"]))
def test_release_reads_the_numeric_part(parts: list[int], suffix: str) -> None:
    assert release(".".join(map(str, parts)) + suffix) == tuple(parts)


def test_a_bad_entry_is_named_with_its_file(tmp_path: object) -> None:
    from pathlib import Path

    directory = Path(str(tmp_path))
    (directory / "p.yaml").write_text(
        "rules:\n  - id: CE-5\n    vector: 6\n    severity: MEDIUM\n    title: t\n"
        "    lists:\n      vulnerable: [runc=1.2]\n      flags: [no_such_flag]\n"
    )
    rules = load_rules(directory)
    errors = [message for _, message in registry().list_errors(rules)]
    assert errors == ["CE-5: 'runc=1.2' is not name<version or name<=version",
                      errors[1]] and "no_such_flag" in errors[1]  # fmt: skip
    with pytest.raises(RuleFileError, match="needs lists"):
        load_site_rules_from(directory)


def load_site_rules_from(directory: object) -> None:
    from pathlib import Path

    (Path(str(directory)) / "p.yaml").write_text(
        "rules:\n  - id: W-2\n    vector: 2\n    severity: CRITICAL\n    title: t\n"
        "    thresholds: {bulk_read_bytes: 1, bulk_window_seconds: 1, egress_within_seconds: 1,"
        " egress_ratio: 0.5}\n"
    )
    load_site_rules(Path(str(directory)))


def _read(second: int, size: int, job: str = "7") -> dict[str, object]:
    return {"ts": T0 + timedelta(seconds=second), "job_id": job, "node": "gpu01",
            "access": "read", "bytes": size, "path": "/ckpt/a/model.pt",
            "source_name": "tetragon.log", "source_line": second}  # fmt: skip


def test_w2_needs_bulk_reads_then_egress_within_the_window() -> None:
    owners = {"7": JobOwner("bob", "nlp")}
    gib = 2**30
    # 1.5 GiB over 20 minutes is no bulk read (the window is 10 min)
    slow = CorrelationRules(RULES)
    reads = [_read(600 * i, gib // 2) for i in range(3)]
    late = Egress("SC-3", "7", "gpu01", T0 + timedelta(seconds=1300), "connect out")
    assert slow.evaluate(reads, [], owners=owners, egress=[late]) == []
    # 1.5 GiB in 2 minutes, egress 14 min later: W-2; egress 16 min later: nothing
    for delay, fires in ((14 * 60, True), (16 * 60, False)):
        rules = CorrelationRules(RULES)
        fast = [_read(60 * i, gib // 2) for i in range(3)]
        egress = Egress("RD-2", None, "gpu01", T0 + timedelta(seconds=120 + delay), "residual")
        found = rules.evaluate(fast, [], owners=owners, egress=[egress])
        assert bool(found) is fires, delay
        if fires:
            (alert,) = found
            assert (alert.rule_id, alert.job_id, alert.user, alert.node) == (
                "W-2", "7", "bob", "gpu01")  # fmt: skip
            assert alert.severity is Severity.CRITICAL
            assert "1,610,612,736 bytes" in alert.evidence[0].summary
            # fired once: the same egress again raises nothing more
            assert rules.evaluate([], [], owners=owners, egress=[egress]) == []
    # egress on another node, another job: nothing
    other = CorrelationRules(RULES)
    fast = [_read(60 * i, gib // 2) for i in range(3)]
    away = Egress("SC-3", "8", "gpu02", T0 + timedelta(seconds=300), "connect out")
    assert other.evaluate(fast, [], owners=owners, egress=[away]) == []


def test_dp3_names_each_dataset_whose_url_list_has_no_hashes() -> None:
    datasets = {"/d/web": ("/d/web/urls.tsv", False), "/d/curated": ("/d/curated/urls.tsv", True)}
    found = posture_alerts(_posture(datasets=datasets), RULES)
    assert [(a.rule_id, a.subject, a.node) for a in found] == [("DP-3", "/d/web", "gpu01")]
    assert "/d/web/urls.tsv" in found[0].evidence[0].summary


def test_dp3_spares_the_roots_a_site_accepts() -> None:
    from dataclasses import replace

    rules = dict(RULES)
    rules["DP-3"] = replace(RULES["DP-3"], lists={"accepted_roots": ("/d/web",)})
    assert posture_alerts(_posture(datasets={"/d/web": ("/d/web/urls.tsv", False)}), rules) == []


@given(
    st.dictionaries(st.sampled_from(["torch", "runc", "ray"]), st.sampled_from(["1.0", "2.5.1"])),
    st.frozensets(st.sampled_from(sorted(FLAGS))),
)
def test_facts_rows_become_one_posture_per_check(
    versions: dict[str, str], raised: frozenset[str]
) -> None:
    later = T0 + timedelta(days=1)
    installed = versions | {"apptainer": "1.3.6"}

    def row(checked: datetime, kind: str, name: str, value: str) -> dict[str, object]:
        return {"node": "gpu01", "checked_at": checked, "kind": kind, "name": name,
                "value": value, "detail": None}  # fmt: skip

    rows = [row(T0, "version", k, v) for k, v in installed.items()]
    rows += [row(later, "flag", f, "1" if f in raised else "0") for f in sorted(FLAGS)]
    rows.append(row(later, "flag", "from_a_later_version", "1"))
    first, second = postures_from_facts(rows)
    assert (first.checked_at, dict(first.versions)) == (T0, installed)
    assert second.checked_at == later
    assert {f for f in FLAGS if getattr(second, f)} == raised
