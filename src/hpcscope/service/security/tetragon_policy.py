"""Tetragon TracingPolicies: the crown-jewel policy rendered from the topology, and a validator.

The policy (``security.md`` §7) watches every access to the model weights, checkpoints and
datasets the topology names (``storage.checkpoints_root``, ``storage.datasets_root``,
``model_weights.checkpoint_root``):

- kprobe ``security_file_permission`` (arg0 ``file``, arg1 ``int``: 4 = MAY_READ,
  2 = MAY_WRITE) with ``matchArgs`` ``Prefix`` on the roots, action ``Post`` with
  ``rateLimit`` (per thread unless ``rateLimitScope`` says ``process`` or ``global``);
- a second ``security_file_permission`` selector: writes (``Mask`` 2) of the files an
  installer leaves in a ``site-packages`` (:data:`INSTALL_SUFFIXES`: ``*.dist-info/METADATA``,
  ``RECORD``, ``.pth``), anywhere, for SC-5 (a distribution installed during a job);
- kprobe ``security_mmap_file`` with ``Postfix`` on the weight extensions (mmap loads, from any
  directory: a copy in ``/tmp`` is still the weights);
- ``security_path_truncate`` (kernels < 6.2) and ``security_file_truncate`` (>= 6.2) with
  ``Prefix`` on the roots and ``ignore: {callNotFound: true}``, since only one exists;
- ``security_path_unlink`` (arg0 the directory ``path``, arg1 the ``dentry``) with ``Prefix``
  on the roots: files removed under a dataset root (DP-6).

Limits: hard links and bind mounts evade path matching; GPUDirect Storage may bypass per-read
hooks (use opens, mmaps and Lustre job_stats for volume).

:func:`validate_tracing_policy` checks a policy against the schema facts of ``security.md`` §8;
it runs on what we render, what we ship under ``deploy/tetragon/`` and Tetragon's own examples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hpcscope.model.topology import Topology
from hpcscope.service.settings import REPO_ROOT

PolicyDocument = dict[str, Any]  # a YAML document of Tetragon's CRD: validate_tracing_policy
"""A TracingPolicy (or one of its parts) as YAML reads and writes it; its shape is checked by
:func:`validate_tracing_policy`, not by a static type."""

POLICY_NAME = "hpcscope-weights"
DEFAULT_WEIGHT_EXTENSIONS: tuple[str, ...] = (
    "safetensors",
    "pt",
    "pth",
    "bin",
    "ckpt",
    "distcp",
)
"""Weight and checkpoint file extensions of ``security.md`` §7 (the topology may add more)."""

INSTALL_SUFFIXES: tuple[str, ...] = (".dist-info/METADATA", ".dist-info/RECORD", ".pth")
"""What every Python installer writes (``pip``, ``python -m pip``, ``uv``): SC-5's evidence."""
MAY_WRITE = 2

ARG_OPERATORS = frozenset(
    {"Equal", "NotEqual", "Prefix", "Postfix", "Mask", "FileType", "NotFileType", "CelExpr",
     "GreaterThan", "GT", "LessThan", "LT", "InRange", "NotInRange", "InMap", "NotInMap",
     "SubString", "SubStringIgnoreCase"}
)  # fmt: skip
SOCK_OPERATORS = frozenset(
    {"SPort", "NotSPort", "SPortPriv", "NotSPortPriv", "DPort", "NotDPort", "DPortPriv",
     "NotDPortPriv", "SAddr", "NotSAddr", "DAddr", "NotDAddr", "Protocol", "Family", "State"}
)  # fmt: skip
"""Operators on a ``sock``/``skb`` argument only (Tetragon's selectors reference)."""
SOCK_ARG_TYPES = frozenset({"sock", "socket", "skb", "sockaddr"})
STRING_ONLY_OPERATORS = frozenset({"NotPrefix", "NotPostfix"})  # never on file/path args
BINARY_OPERATORS = frozenset({"In", "NotIn", "Prefix", "NotPrefix", "Postfix", "NotPostfix"})
ACTIONS = frozenset(
    {"Post", "NoPost", "Sigkill", "Signal", "Override", "FollowFD", "UnfollowFD", "CopyFD",
     "GetUrl", "DnsLookup", "TrackSock", "UntrackSock", "NotifyEnforcer", "Set"}
)  # fmt: skip
RATE_LIMIT_SCOPES = frozenset({"thread", "process", "global"})
ARG_TYPES = frozenset(
    {
        "int", "uint32", "int32", "uint64", "int64", "size_t", "long", "char_buf", "char_iovec",
        "string", "nop", "file", "path", "fd", "sock", "socket", "skb", "sockaddr", "cred",
        "bpf_attr",
        "perf_event", "bpf_map", "user_namespace", "capability", "kiocb", "iov_iter",
        "load_info", "module", "syscall64", "linux_binprm", "data_loc", "net_device",
        "bpf_prog", "dentry", "kernel_cap_t", "cap_inheritable", "cap_permitted",
        "cap_effective", "uint8", "int8", "uint16", "int16",
    }
)  # fmt: skip
FILE_ARG_TYPES = frozenset({"file", "path", "fd", "linux_binprm", "dentry"})
_KPROBE_KEYS = frozenset(
    {"syscall", "return", "args", "returnArg", "returnArgAction", "selectors", "ignore",
     "message", "tags", "data"}
)  # fmt: skip
#: Hook sections of a policy's spec and the keys that name each hook.
_HOOK_SECTIONS: Mapping[str, tuple[str, ...]] = {
    "kprobes": ("call",),
    "tracepoints": ("subsystem", "event"),
    "lsmhooks": ("hook",),
}
_SELECTOR_KEYS = frozenset(
    {"matchArgs", "matchBinaries", "matchActions", "matchPIDs", "matchNamespaces",
     "matchCapabilities", "matchNamespaceChanges", "matchCapabilityChanges",
     "matchReturnArgs", "matchReturnActions", "matchData"}
)  # fmt: skip


def protected_roots(topology: Topology) -> tuple[str, ...]:
    """Checkpoint and dataset roots the topology names, each ending in ``/``, sorted, unique.

    The trailing slash keeps ``Prefix /ckpt/`` from matching a sibling ``/ckpt-old``.
    """
    roots = {topology.checkpoint_root}
    for key in ("checkpoints_root", "datasets_root"):
        value = topology.storage.get(key)
        if isinstance(value, str) and value:
            roots.add(value)
    return tuple(sorted(root.rstrip("/") + "/" for root in roots if root.strip("/")))


def dataset_roots(topology: Topology) -> tuple[str, ...]:
    """The topology's dataset root (``storage.datasets_root``), if it names one (DP-6)."""
    value = topology.storage.get("datasets_root")
    return (value,) if isinstance(value, str) and value.strip("/") else ()


def weight_suffixes(topology: Topology) -> tuple[str, ...]:
    """``.ext`` suffixes for ``Postfix``: §7's list plus the topology's ``model_weights``."""
    extensions = set(DEFAULT_WEIGHT_EXTENSIONS) | {
        fmt.lstrip(".").lower() for fmt in topology.weight_formats
    }
    return tuple(f".{ext}" for ext in sorted(extensions) if ext)


def _post(rate_limit: str, scope: str | None) -> dict[str, str]:
    action = {"action": "Post", "rateLimit": rate_limit}
    if scope is not None:
        action["rateLimitScope"] = scope
    return action


def crown_jewel_policy(
    roots: Sequence[str],
    weight_suffixes: Sequence[str],
    *,
    name: str = POLICY_NAME,
    rate_limit: str = "1m",
    rate_limit_scope: str | None = None,
) -> PolicyDocument:
    """The TracingPolicy of ``security.md`` §7 as a plain document (pure: no I/O).

    Args:
        roots: path prefixes to watch (checkpoints, weights, datasets), e.g. from
            :func:`protected_roots`.
        weight_suffixes: ``.safetensors``-style suffixes watched on mmap.
        name: ``metadata.name``.
        rate_limit: Tetragon duration between two posted events of one thread and path.
        rate_limit_scope: None (thread), ``process`` or ``global``.

    Raises:
        ValueError: no root, no suffix, or an unknown rate-limit scope.
    """
    if not roots or not weight_suffixes:
        raise ValueError("a crown-jewel policy needs at least one root and one suffix")
    if rate_limit_scope is not None and rate_limit_scope not in RATE_LIMIT_SCOPES:
        raise ValueError(f"rate_limit_scope must be one of {sorted(RATE_LIMIT_SCOPES)}")
    post = [_post(rate_limit, rate_limit_scope)]
    prefix = {"index": 0, "operator": "Prefix", "values": list(roots)}
    int_return = {"index": 0, "type": "int"}
    kprobes: list[PolicyDocument] = [
        {
            "call": "security_file_permission",
            "syscall": False,
            "return": True,
            "args": [{"index": 0, "type": "file"}, {"index": 1, "type": "int"}],
            "returnArg": dict(int_return),
            "selectors": [
                {"matchArgs": [dict(prefix)], "matchActions": list(post)},
                {
                    "matchArgs": [
                        {"index": 0, "operator": "Postfix", "values": list(INSTALL_SUFFIXES)},
                        {"index": 1, "operator": "Mask", "values": [str(MAY_WRITE)]},
                    ],
                    "matchActions": list(post),
                },
            ],
        },
        {
            "call": "security_mmap_file",
            "syscall": False,
            "return": True,
            "args": [
                {"index": 0, "type": "file"},
                {"index": 1, "type": "uint32"},
                {"index": 2, "type": "nop"},
            ],
            "returnArg": dict(int_return),
            "selectors": [
                {
                    "matchArgs": [
                        {"index": 0, "operator": "Postfix", "values": list(weight_suffixes)}
                    ],
                    "matchActions": list(post),
                }
            ],
        },
    ]
    for call, arg_type in (("security_path_truncate", "path"), ("security_file_truncate", "file")):
        kprobes.append(
            {
                "call": call,
                "syscall": False,
                "return": True,
                "ignore": {"callNotFound": True},
                "args": [{"index": 0, "type": arg_type}],
                "returnArg": dict(int_return),
                "selectors": [{"matchArgs": [dict(prefix)], "matchActions": [{"action": "Post"}]}],
            }
        )
    # unlinks under the roots (DP-6): arg0 the directory's full path, arg1 the entry (Tetragon
    # prints a dentry as a path_arg up to its mount point); Prefix on the directory, so the
    # roots without their trailing slash (a file right under a root has the root as parent)
    kprobes.append(
        {
            "call": "security_path_unlink",
            "syscall": False,
            "return": True,
            "args": [{"index": 0, "type": "path"}, {"index": 1, "type": "dentry"}],
            "returnArg": dict(int_return),
            "selectors": [
                {
                    "matchArgs": [
                        {
                            "index": 0,
                            "operator": "Prefix",
                            "values": sorted({r.rstrip("/") for r in roots}),
                        }
                    ],
                    "matchActions": [{"action": "Post"}],
                }
            ],
        }
    )
    return {
        "apiVersion": "cilium.io/v1alpha1",
        "kind": "TracingPolicy",
        "metadata": {"name": name},
        "spec": {"kprobes": kprobes},
    }


def topology_policy(topology: Topology) -> PolicyDocument:
    """The crown-jewel policy for a topology's roots and weight formats."""
    return crown_jewel_policy(protected_roots(topology), weight_suffixes(topology))


class _NoAliases(yaml.SafeDumper):
    """Write repeated values in full: operators read YAML without anchors more easily."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_policy_yaml(policy: Mapping[str, Any], *, header: Iterable[str] = ()) -> str:
    """YAML text of a policy, keys in document order, with ``# ``-comment header lines."""
    comments = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header)
    body = yaml.dump(dict(policy), Dumper=_NoAliases, sort_keys=False, width=100)
    return comments + body


def validate_tracing_policy(doc: Any) -> list[str]:
    """Problems of a TracingPolicy document, each naming its path; empty when valid.

    Checks the facts of ``security.md`` §8: ``apiVersion: cilium.io/v1alpha1``,
    ``kind: TracingPolicy`` (or ``TracingPolicyNamespaced``), ``metadata.name``,
    ``spec.kprobes[]`` with ``call`` (``spec.tracepoints[]`` with ``subsystem`` and ``event``,
    ``spec.lsmhooks[]`` with ``hook``), optional ``syscall``, ``args[{index, type}]``,
    ``returnArg``, ``selectors[{matchArgs, matchBinaries, matchActions}]``; operators and
    actions from the allowed lists; no ``NotPrefix``/``NotPostfix`` on file arguments;
    address and port operators (``NotDAddr``...) on ``sock`` arguments only; ``matchArgs``
    indices declared in ``args``; ``rateLimit`` only on ``Post``.
    """
    problems: list[str] = []
    if not isinstance(doc, dict):
        return ["document: not a mapping"]
    if doc.get("apiVersion") != "cilium.io/v1alpha1":
        problems.append(f"apiVersion: {doc.get('apiVersion')!r} is not cilium.io/v1alpha1")
    if doc.get("kind") not in ("TracingPolicy", "TracingPolicyNamespaced"):
        problems.append(f"kind: {doc.get('kind')!r} is not TracingPolicy")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        problems.append("metadata.name: missing")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec: missing"]
    hooks = 0
    for section, name_key in _HOOK_SECTIONS.items():
        entries = spec.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list) or not entries:
            problems.append(f"spec.{section}: not a non-empty list")
            continue
        hooks += len(entries)
        for k, hook in enumerate(entries):
            problems += _kprobe_problems(hook, f"spec.{section}[{k}]", name_key)
    if hooks == 0:
        problems.append("spec.kprobes: missing or empty (and no tracepoints or lsmhooks)")
    return problems


def _kprobe_problems(kprobe: Any, where: str, name_key: tuple[str, ...]) -> list[str]:
    if not isinstance(kprobe, dict):
        return [f"{where}: not a mapping"]
    known = _KPROBE_KEYS | set(name_key) | {"raw"}
    problems = [f"{where}.{key}: unknown key" for key in kprobe if key not in known]
    for key in name_key:
        if not isinstance(kprobe.get(key), str) or not kprobe[key]:
            problems.append(f"{where}.{key}: missing")
    for flag in ("syscall", "return"):
        if flag in kprobe and not isinstance(kprobe[flag], bool):
            problems.append(f"{where}.{flag}: not a boolean")
    ignore = kprobe.get("ignore")
    if ignore is not None and (not isinstance(ignore, dict) or set(ignore) - {"callNotFound"}):
        problems.append(f"{where}.ignore: only callNotFound is known")
    arg_types: dict[int, str] = {}
    args = kprobe.get("args", [])
    if not isinstance(args, list):
        return [*problems, f"{where}.args: not a list"]
    for a, arg in enumerate([*args, *([kprobe["returnArg"]] if "returnArg" in kprobe else [])]):
        at = f"{where}.args[{a}]" if a < len(args) else f"{where}.returnArg"
        if not isinstance(arg, dict) or not isinstance(arg.get("index"), int):
            problems.append(f"{at}.index: missing")
            continue
        if arg.get("type") not in ARG_TYPES:
            problems.append(f"{at}.type: unknown type {arg.get('type')!r}")
        if a < len(args):
            arg_types[arg["index"]] = str(arg.get("type"))
    selectors = kprobe.get("selectors", [])
    if not isinstance(selectors, list):
        return [*problems, f"{where}.selectors: not a list"]
    for s, selector in enumerate(selectors):
        problems += _selector_problems(selector, arg_types, f"{where}.selectors[{s}]")
    return problems


def _selector_problems(selector: Any, arg_types: Mapping[int, str], where: str) -> list[str]:
    if not isinstance(selector, dict):
        return [f"{where}: not a mapping"]
    problems = [f"{where}.{key}: unknown selector" for key in selector if key not in _SELECTOR_KEYS]
    for m, match in enumerate(selector.get("matchArgs") or []):
        at = f"{where}.matchArgs[{m}]"
        if not isinstance(match, dict):
            problems.append(f"{at}: not a mapping")
            continue
        index, operator = match.get("index"), match.get("operator")
        if index not in arg_types:
            problems.append(f"{at}.index: {index!r} is not a declared argument")
        arg_type = arg_types.get(index, "") if isinstance(index, int) else ""
        if operator in STRING_ONLY_OPERATORS:
            if arg_type in FILE_ARG_TYPES:
                problems.append(f"{at}.operator: {operator} is not allowed on file arguments")
        elif operator in SOCK_OPERATORS:
            if arg_type not in SOCK_ARG_TYPES:
                problems.append(f"{at}.operator: {operator} needs a sock argument")
        elif operator not in ARG_OPERATORS:
            problems.append(f"{at}.operator: unknown operator {operator!r}")
        if not isinstance(match.get("values"), list) or not match["values"]:
            problems.append(f"{at}.values: missing or empty")
    for m, match in enumerate(selector.get("matchBinaries") or []):
        if not isinstance(match, dict) or match.get("operator") not in BINARY_OPERATORS:
            problems.append(
                f"{where}.matchBinaries[{m}].operator: not one of {sorted(BINARY_OPERATORS)}"
            )
    for m, action in enumerate(selector.get("matchActions") or []):
        at = f"{where}.matchActions[{m}]"
        if not isinstance(action, dict) or action.get("action") not in ACTIONS:
            problems.append(f"{at}.action: not one of {sorted(ACTIONS)}")
            continue
        if "rateLimit" in action and action["action"] != "Post":
            problems.append(f"{at}.rateLimit: only Post is rate limited")
        scope = action.get("rateLimitScope")
        if scope is not None and scope not in RATE_LIMIT_SCOPES:
            problems.append(f"{at}.rateLimitScope: not one of {sorted(RATE_LIMIT_SCOPES)}")
    return problems


def policy_header(topology: Topology) -> tuple[str, ...]:
    """The comment block written above a rendered policy."""
    return (
        f"Generated by `hpcscope deploy tetragon` from topology {topology.name!r}: re-run it",
        "after changing the topology's checkpoint or dataset roots instead of editing here.",
        "Watches reads/writes (security_file_permission: 4 MAY_READ, 2 MAY_WRITE) and",
        "truncates under the roots, writes of site-packages *.dist-info/METADATA|RECORD and",
        ".pth files anywhere (SC-5), mmaps of weight files anywhere, and unlinks under the",
        "roots (DP-6) (docs/security.md).",
        "Install: tetra tracingpolicy add hpcscope-weights.yaml, or copy it into",
        "/etc/tetragon/tetragon.tp.d/ (deploy/tetragon/README.md).",
    )


#: The rendered policy's file name (the topology's roots); the static ones sit beside it.
RENDERED_POLICY_FILE = "hpcscope-weights.yaml"


def bundled_policies_dir() -> Path:
    """The TracingPolicies shipped with hpcscope (``deploy/tetragon`` of the checkout or the
    wheel's ``hpcscope/tetragon``)."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "tetragon",
        REPO_ROOT / "deploy" / "tetragon",
    ):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("no bundled TracingPolicy directory")


def static_policies() -> list[Path]:
    """The shipped policies that do not depend on the topology, by name (every
    ``hpcscope-*.yaml`` of :func:`bundled_policies_dir` but the rendered one)."""
    return sorted(
        path
        for path in bundled_policies_dir().glob("hpcscope-*.yaml")
        if path.name != RENDERED_POLICY_FILE
    )
