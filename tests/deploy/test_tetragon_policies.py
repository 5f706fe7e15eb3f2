"""Tetragon TracingPolicies: the shipped default is the rendered one (golden), and every policy
we render or ship, and Tetragon's own examples, pass the schema facts of security.md §8."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcscope.model.topology import load_topology
from hpcscope.service.security.tetragon_policy import (
    policy_header,
    render_policy_yaml,
    topology_policy,
    validate_tracing_policy,
)
from hpcscope.service.settings import bundled_topology

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "tetragon" / "hpcscope-weights.yaml"
SAMPLES = sorted((ROOT / "tests" / "fixtures" / "security" / "tetragon").glob("tracingpolicy_*"))


def test_shipped_policy_is_the_rendered_default() -> None:
    topology = load_topology(bundled_topology("2x8-h100"))
    expected = render_policy_yaml(topology_policy(topology), header=policy_header(topology))
    assert SHIPPED.read_text() == expected, "re-run: hpcscope deploy tetragon --out deploy/tetragon"


@pytest.mark.parametrize("path", [SHIPPED, *SAMPLES], ids=lambda p: p.name)
def test_shipped_and_upstream_policies_validate(path: Path) -> None:
    assert validate_tracing_policy(yaml.safe_load(path.read_text())) == []


def test_upstream_samples_are_present() -> None:
    assert [p.name for p in SAMPLES] == [
        "tracingpolicy_filename_monitoring.yaml",
        "tracingpolicy_quickstart_file_monitoring_filtered.yaml",
    ]


@pytest.mark.parametrize("name", ["2x8-h100", "128x8-h100"])
def test_rendered_policy_covers_the_roots_and_weight_formats(name: str) -> None:
    topology = load_topology(bundled_topology(name))
    policy = topology_policy(topology)
    assert validate_tracing_policy(policy) == []
    kprobes = {k["call"]: k for k in policy["spec"]["kprobes"]}
    assert set(kprobes) == {
        "security_file_permission",
        "security_mmap_file",
        "security_path_truncate",
        "security_file_truncate",
    }
    permission = kprobes["security_file_permission"]
    assert [a["type"] for a in permission["args"]] == ["file", "int"]
    selector, installs = permission["selectors"]
    [prefix] = selector["matchArgs"]
    assert prefix["operator"] == "Prefix"
    roots = {topology.checkpoint_root, topology.storage["datasets_root"]}
    assert set(prefix["values"]) == {root.rstrip("/") + "/" for root in roots}
    assert selector["matchActions"] == [{"action": "Post", "rateLimit": "1m"}]
    # SC-5: writes (mask 2) of what an installer leaves in a site-packages, anywhere
    postfix, mask = installs["matchArgs"]
    assert (postfix["operator"], mask["operator"], mask["values"]) == ("Postfix", "Mask", ["2"])
    assert set(postfix["values"]) == {".dist-info/METADATA", ".dist-info/RECORD", ".pth"}
    [mmap] = kprobes["security_mmap_file"]["selectors"]
    suffixes = mmap["matchArgs"][0]["values"]
    assert mmap["matchArgs"][0]["operator"] == "Postfix"
    assert {f".{fmt}" for fmt in topology.weight_formats} <= set(suffixes)
    assert {".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".distcp"} <= set(suffixes)
    for call in ("security_path_truncate", "security_file_truncate"):
        assert kprobes[call]["ignore"] == {"callNotFound": True}


def _broken(change: str) -> dict[str, Any]:
    topology = load_topology(bundled_topology("2x8-h100"))
    policy = copy.deepcopy(topology_policy(topology))
    kprobe = policy["spec"]["kprobes"][0]
    selector = kprobe["selectors"][0]
    if change == "apiVersion":
        policy["apiVersion"] = "cilium.io/v1"
    elif change == "operator":
        selector["matchArgs"][0]["operator"] = "Contains"
    elif change == "notprefix-on-file":
        selector["matchArgs"][0]["operator"] = "NotPrefix"
    elif change == "index":
        selector["matchArgs"][0]["index"] = 5
    elif change == "action":
        selector["matchActions"][0]["action"] = "Kill"
    elif change == "ratelimit-on-sigkill":
        selector["matchActions"][0]["action"] = "Sigkill"
    elif change == "arg-type":
        kprobe["args"][1]["type"] = "integer"
    elif change == "binaries":
        selector["matchBinaries"] = [{"operator": "Equal", "values": ["/bin/sh"]}]
    elif change == "no-call":
        del kprobe["call"]
    elif change == "kind":
        policy["kind"] = "Policy"
    return policy


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("apiVersion", "apiVersion"),
        ("operator", "matchArgs[0].operator: unknown operator 'Contains'"),
        ("notprefix-on-file", "NotPrefix is not allowed on file arguments"),
        ("index", "matchArgs[0].index: 5 is not a declared argument"),
        ("action", "matchActions[0].action"),
        ("ratelimit-on-sigkill", "only Post is rate limited"),
        ("arg-type", "args[1].type: unknown type 'integer'"),
        ("binaries", "matchBinaries[0].operator"),
        ("no-call", "spec.kprobes[0].call: missing"),
        ("kind", "kind"),
    ],
)
def test_validator_names_what_is_wrong(change: str, problem: str) -> None:
    problems = validate_tracing_policy(_broken(change))
    assert any(problem in p for p in problems), problems


def test_policy_needs_roots_and_suffixes() -> None:
    from hpcscope.service.security.tetragon_policy import crown_jewel_policy

    with pytest.raises(ValueError, match="root"):
        crown_jewel_policy([], [".pt"])
    with pytest.raises(ValueError, match="rate_limit_scope"):
        crown_jewel_policy(["/x/"], [".pt"], rate_limit_scope="node")
    scoped = crown_jewel_policy(["/x/"], [".pt"], rate_limit_scope="process")
    assert validate_tracing_policy(scoped) == []
