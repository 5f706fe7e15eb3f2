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
STATIC = sorted(p for p in (ROOT / "deploy" / "tetragon").glob("hpcscope-*.yaml") if p != SHIPPED)
SAMPLES = sorted((ROOT / "tests" / "fixtures" / "security" / "tetragon").glob("tracingpolicy_*"))


def test_shipped_policy_is_the_rendered_default() -> None:
    topology = load_topology(bundled_topology("2x8-h100"))
    expected = render_policy_yaml(topology_policy(topology), header=policy_header(topology))
    assert SHIPPED.read_text() == expected, "re-run: hpcscope deploy tetragon --out deploy/tetragon"


@pytest.mark.parametrize("path", [SHIPPED, *STATIC, *SAMPLES], ids=lambda p: p.name)
def test_shipped_and_upstream_policies_validate(path: Path) -> None:
    assert validate_tracing_policy(yaml.safe_load(path.read_text())) == []


def test_upstream_samples_are_present() -> None:
    assert [p.name for p in SAMPLES] == [
        "tracingpolicy_filename_monitoring.yaml",
        "tracingpolicy_lsm_file_open.yaml",
        "tracingpolicy_monitor_kernel_modules.yaml",
        "tracingpolicy_process_creds_installed.yaml",
        "tracingpolicy_quickstart_file_monitoring_filtered.yaml",
        "tracingpolicy_sys_setuid.yaml",
        "tracingpolicy_tcp_connect_only_private_addrs.yaml",
    ]


def _hooks(path: Path) -> dict[str, dict[str, Any]]:
    return {k["call"]: k for k in yaml.safe_load(path.read_text())["spec"]["kprobes"]}


def test_static_policies_post_the_hooks_the_node_rules_read() -> None:
    """Each shipped policy hooks what docs/security.md's event contract says its rules read;
    its name is the file's."""
    by_file = {p.name: _hooks(p) for p in STATIC}
    assert sorted(by_file) == [
        "hpcscope-credentials.yaml",
        "hpcscope-modules.yaml",
        "hpcscope-namespaces.yaml",
        "hpcscope-network.yaml",
        "hpcscope-sensitive-files.yaml",
    ]
    for path in STATIC:
        assert yaml.safe_load(path.read_text())["metadata"]["name"] == path.stem
    assert set(by_file["hpcscope-namespaces.yaml"]) == {"sys_setns"}
    assert set(by_file["hpcscope-credentials.yaml"]) == {
        "commit_creds", "sys_setuid", "sys_setresuid"
    }  # fmt: skip
    assert set(by_file["hpcscope-modules.yaml"]) == {
        "security_kernel_module_request", "security_kernel_read_file", "do_init_module",
        "free_module",
    }  # fmt: skip
    files = by_file["hpcscope-sensitive-files.yaml"]["security_file_permission"]
    writes, secrets = files["selectors"]
    assert writes["matchArgs"][1] == {"index": 1, "operator": "Mask", "values": ["2"]}
    assert "/etc/shadow" in secrets["matchArgs"][0]["values"]
    network = by_file["hpcscope-network.yaml"]
    assert [a["type"] for a in network["tcp_connect"]["args"]] == ["sock"]
    outside, shells = network["tcp_connect"]["selectors"]
    assert outside["matchArgs"][0]["operator"] == "NotDAddr"
    assert "/nc" in shells["matchBinaries"][0]["values"]
    packet, raw = network["security_socket_create"]["selectors"]
    assert (packet["matchArgs"][0]["index"], packet["matchArgs"][0]["values"]) == (0, ["17"])
    assert (raw["matchArgs"][0]["index"], raw["matchArgs"][0]["values"]) == (1, ["3"])


def test_validator_knows_tracepoints_lsm_hooks_and_socket_operators() -> None:
    lsm = {
        "apiVersion": "cilium.io/v1alpha1",
        "kind": "TracingPolicy",
        "metadata": {"name": "x"},
        "spec": {"lsmhooks": [{"args": [{"index": 0, "type": "file"}]}]},
    }
    assert validate_tracing_policy(lsm) == ["spec.lsmhooks[0].hook: missing"]
    tracepoint = copy.deepcopy(lsm)
    tracepoint["spec"] = {"tracepoints": [{"subsystem": "syscalls", "event": "sys_enter_setns"}]}
    assert validate_tracing_policy(tracepoint) == []
    sock_on_int = copy.deepcopy(lsm)
    sock_on_int["spec"] = {
        "kprobes": [
            {
                "call": "tcp_connect",
                "args": [{"index": 0, "type": "int"}],
                "selectors": [
                    {"matchArgs": [{"index": 0, "operator": "NotDAddr", "values": ["10.0.0.0/8"]}]}
                ],
            }
        ]
    }
    [problem] = validate_tracing_policy(sock_on_int)
    assert problem.endswith("NotDAddr needs a sock argument")


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
        "security_path_unlink",
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
    unlink = kprobes["security_path_unlink"]
    assert [a["type"] for a in unlink["args"]] == ["path", "dentry"]
    [on_dirs] = unlink["selectors"][0]["matchArgs"]
    assert set(on_dirs["values"]) == {root.rstrip("/") for root in roots}


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
