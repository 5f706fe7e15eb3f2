"""Posture rules: SC-7, CE-5, GM-5, DP-3, checked against version lists and flags shipped as data.

A node's posture (:class:`NodePosture`: the versions of the packages and binaries that matter,
and a few facts) is compared with ``deploy/rules/posture.yaml``:

- ``vulnerable``: entries ``name<version`` or ``name<=version`` (``torch<=2.5.1``: CVE-2025-32434,
  ``weights_only=True`` bypass; ``runc<1.2.8``; ``nvidia-container-toolkit<1.17.8``:
  NVIDIAScape); a node whose installed version matches raises the rule once per entry;
- ``flags``: names of :class:`NodePosture` facts that must be false (``pip_extra_index_url``,
  ``ray_jobs_api_exposed``, ``privileged_containers``, ``setuid_apptainer``,
  ``gpu_sharing_on_sensitive``, ``epilog_without_gpu_reset``,
  ``nvlink_counters_user_readable``).

DP-3 reads the check's datasets (:attr:`NodePosture.datasets`): a dataset root whose URL list
carries no per-item hashes (split-view poisoning: what the URLs serve today may not be what was
curated) raises DP-3 once per root, unless the root is on the rule's ``accepted_roots`` list.
:func:`postures_from_facts` turns ``node_posture`` rows (the check's textfile, as stored) into
:class:`NodePosture` values.

Versions compare by their numeric release parts (``2.5.1+cu121`` is 2.5.1; ``1.17.8-1`` is
1.17.8); a version that has no numeric part is reported as unknown, never as safe. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import cast

from hpcscope.analysis.registry import registry
from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Vector
from hpcscope.model.rules import ListCheck, Rule, RuleKind, distinct_evaluators

_VERSION_RULES = ("SC-7", "CE-5", "GM-5")
_ENTRY = re.compile(r"^\s*([A-Za-z0-9_.+-]+?)\s*(<=|<)\s*([0-9][0-9A-Za-z.+-]*)\s*$")
_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True, slots=True)
class NodePosture:
    """What a daily posture check found on one node.

    Attributes:
        versions: installed package or binary -> version (``torch``, ``runc``,
            ``nvidia-container-toolkit``, ``libnvidia-container``, ``ray``...).
        pip_extra_index_url: a pip configuration adds ``--extra-index-url`` (torchtriton).
        ray_jobs_api_exposed: a Ray Jobs API answers without authentication (ShadowRay).
        privileged_containers: enroot/pyxis runs containers privileged.
        setuid_apptainer: Apptainer is installed setuid.
        gpu_sharing_on_sensitive: MIG, MPS or time-slicing on a node marked sensitive.
        epilog_without_gpu_reset: the epilog does not reset (or clear) the GPUs.
        nvlink_counters_user_readable: NVLink counters readable by users (side channel).
        datasets: dataset root -> (its URL list, whether that list has per-item hashes).
    """

    node: str
    checked_at: datetime
    versions: Mapping[str, str] = field(default_factory=dict)
    pip_extra_index_url: bool = False
    ray_jobs_api_exposed: bool = False
    privileged_containers: bool = False
    setuid_apptainer: bool = False
    gpu_sharing_on_sensitive: bool = False
    epilog_without_gpu_reset: bool = False
    nvlink_counters_user_readable: bool = False
    datasets: Mapping[str, tuple[str | None, bool]] = field(default_factory=dict)


FLAGS: frozenset[str] = frozenset(
    f.name
    for f in fields(NodePosture)
    if f.name not in ("node", "checked_at", "versions", "datasets")
)


def postures_from_facts(rows: Iterable[Mapping[str, object]]) -> list[NodePosture]:
    """One :class:`NodePosture` per (node, check) of ``node_posture`` rows (``node``,
    ``checked_at``, ``kind``, ``name``, ``value``, ``detail``); flags this version does not
    know are left out."""
    grouped: dict[tuple[str, datetime], list[Mapping[str, object]]] = {}
    for row in rows:
        checked = row["checked_at"]
        assert isinstance(checked, datetime)
        grouped.setdefault((str(row["node"]), checked), []).append(row)
    out: list[NodePosture] = []
    for (node, checked), facts in sorted(grouped.items()):
        versions = {str(r["name"]): str(r["value"]) for r in facts if r["kind"] == "version"}
        flags = {
            str(r["name"]): str(r["value"]) == "1"
            for r in facts
            if r["kind"] == "flag" and r["name"] in FLAGS
        }
        datasets = {
            str(r["name"]): (None if r["detail"] is None else str(r["detail"]),
                             str(r["value"]) == "1")
            for r in facts
            if r["kind"] == "dataset"
        }  # fmt: skip
        out.append(NodePosture(node, checked, versions=versions, datasets=datasets, **flags))
    return out


def release(version: str) -> tuple[int, ...] | None:
    """``(2, 5, 1)`` for ``2.5.1+cu121``; None when there is no numeric release part."""
    match = _RELEASE.match(version)
    return None if match is None else tuple(int(p) for p in match.group(1).split("."))


def entry_errors(spec: RuleSpec) -> list[str]:
    """Entries of a posture rule's lists that cannot be used (unparsable ``vulnerable``
    entries, unknown flags)."""
    errors: list[str] = []
    rule_id = spec.rule_id
    for entry in spec.items("vulnerable"):
        if _ENTRY.match(entry) is None:
            errors.append(f"{rule_id}: {entry!r} is not name<version or name<=version")
    for flag in spec.items("flags") if rule_id != "DP-3" else ():
        if flag not in FLAGS:
            errors.append(f"{rule_id}: unknown flag {flag!r} ({', '.join(sorted(FLAGS))})")
    return errors


def _pad(parts: tuple[int, ...], size: int) -> tuple[int, ...]:
    return parts + (0,) * (size - len(parts))


def posture_alerts(posture: NodePosture, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """The posture alerts of one node (one per matching entry or raised flag)."""
    found: list[Alert] = []
    dp3 = rules.get("DP-3")
    if dp3 is not None and dp3.enabled:
        accepted = set(dp3.items("accepted_roots"))
        for root, (url_list, hashed) in sorted(posture.datasets.items()):
            if hashed or root in accepted:
                continue
            summary = (f"dataset {root} built from the URL list {url_list or '(unnamed)'}, "
                       "which has no per-item hashes")  # fmt: skip
            found.append(_alert(dp3, posture, root, summary))
    for rule_id in _VERSION_RULES:
        spec = rules.get(rule_id)
        if spec is None or not spec.enabled:
            continue
        for entry in spec.items("vulnerable"):
            match = _ENTRY.match(entry)
            if match is None:
                continue
            name, operator, bound_text = match.groups()
            installed = posture.versions.get(name)
            if installed is None:
                continue
            have, bound = release(installed), release(bound_text)
            if have is None or bound is None:
                summary = f"{name} {installed}: version not understood, checked against {entry}"
            else:
                size = max(len(have), len(bound))
                a, b = _pad(have, size), _pad(bound, size)
                if not (a < b or (operator == "<=" and a == b)):
                    continue
                summary = f"{name} {installed} is {operator} {bound_text} ({entry})"
            found.append(_alert(spec, posture, f"{name} {installed}", summary))
        for flag in spec.items("flags"):
            if getattr(posture, flag, False):
                found.append(_alert(spec, posture, flag, f"{flag.replace('_', ' ')}"))
    return found


def _alert(spec: RuleSpec, posture: NodePosture, subject: str, summary: str) -> Alert:
    return Alert(
        rule_id=spec.rule_id,
        vector=spec.vector,
        severity=spec.severity,
        title=spec.title,
        first_seen=posture.checked_at,
        last_seen=posture.checked_at,
        node=posture.node,
        subject=subject,
        evidence=(Evidence(f"posture: {summary}", "posture check", None),),
    )


#: A posture rule's evaluator: one node's posture and the site's rules -> its alerts.
PostureEvaluator = Callable[[NodePosture, Mapping[str, RuleSpec]], list[Alert]]


def posture_rule(
    rule_id: str,
    vector: Vector,
    evaluator: PostureEvaluator,
    *,
    thresholds: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
    check: ListCheck | None = None,
) -> Rule:
    """A posture rule's declaration (for a module's ``RULES``)."""
    return Rule(
        rule_id, vector, RuleKind.POSTURE, evaluator, thresholds=thresholds, lists=lists,
        check=check,
    )  # fmt: skip


def evaluate_posture(
    posture: NodePosture,
    rules: Mapping[str, RuleSpec],
    *,
    registered: Sequence[Rule] | None = None,
) -> list[Alert]:
    """Every registered posture evaluator (default: the registry's) over one node."""
    declared = registry().of_kind(RuleKind.POSTURE) if registered is None else registered
    evaluators = [cast(PostureEvaluator, e) for e in distinct_evaluators(declared)]
    return [alert for evaluator in evaluators for alert in evaluator(posture, rules)]


_VERSION_LISTS = ("vulnerable", "flags")
RULES: tuple[Rule, ...] = (
    posture_rule("SC-7", Vector.SUPPLY_CHAIN, posture_alerts, lists=_VERSION_LISTS,
                 check=entry_errors),
    posture_rule("CE-5", Vector.CONTAINER_ESCAPE, posture_alerts, lists=_VERSION_LISTS,
                 check=entry_errors),
    posture_rule("GM-5", Vector.GPU_MEMORY, posture_alerts, lists=_VERSION_LISTS,
                 check=entry_errors),
    posture_rule("DP-3", Vector.DATA_POISONING, posture_alerts, lists=("accepted_roots",),
                 check=entry_errors),
)  # fmt: skip
