"""Posture rules: SC-7, CE-5, GM-5, checked against version lists and flags shipped as data.

A node's posture (:class:`NodePosture`: the versions of the packages and binaries that matter,
and a few facts) is compared with ``deploy/rules/posture.yaml``:

- ``vulnerable``: entries ``name<version`` or ``name<=version`` (``torch<=2.5.1``: CVE-2025-32434,
  ``weights_only=True`` bypass; ``runc<1.2.8``; ``nvidia-container-toolkit<1.17.8``:
  NVIDIAScape); a node whose installed version matches raises the rule once per entry;
- ``flags``: names of :class:`NodePosture` facts that must be false (``pip_extra_index_url``,
  ``ray_jobs_api_exposed``, ``privileged_containers``, ``setuid_apptainer``,
  ``gpu_sharing_on_sensitive``, ``epilog_without_gpu_reset``,
  ``nvlink_counters_user_readable``).

Versions compare by their numeric release parts (``2.5.1+cu121`` is 2.5.1; ``1.17.8-1`` is
1.17.8); a version that has no numeric part is reported as unknown, never as safe. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime

from hpcscope.model.alerts import Alert, Evidence, RuleSpec

POSTURE_RULE_IDS: tuple[str, ...] = ("SC-7", "CE-5", "GM-5")
REQUIRED_LISTS: Mapping[str, tuple[str, ...]] = dict.fromkeys(
    POSTURE_RULE_IDS, ("vulnerable", "flags")
)
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


FLAGS: frozenset[str] = frozenset(
    f.name for f in fields(NodePosture) if f.name not in ("node", "checked_at", "versions")
)


def release(version: str) -> tuple[int, ...] | None:
    """``(2, 5, 1)`` for ``2.5.1+cu121``; None when there is no numeric release part."""
    match = _RELEASE.match(version)
    return None if match is None else tuple(int(p) for p in match.group(1).split("."))


def entry_errors(rules: Mapping[str, RuleSpec]) -> list[tuple[RuleSpec, str]]:
    """Entries of the posture lists that cannot be used, with their rule."""
    errors: list[tuple[RuleSpec, str]] = []
    for rule_id in POSTURE_RULE_IDS:
        spec = rules.get(rule_id)
        if spec is None:
            continue
        for entry in spec.items("vulnerable"):
            if _ENTRY.match(entry) is None:
                errors.append((spec, f"{rule_id}: {entry!r} is not name<version or name<=version"))
        for flag in spec.items("flags"):
            if flag not in FLAGS:
                errors.append(
                    (spec, f"{rule_id}: unknown flag {flag!r} ({', '.join(sorted(FLAGS))})")
                )
    return errors


def _pad(parts: tuple[int, ...], size: int) -> tuple[int, ...]:
    return parts + (0,) * (size - len(parts))


def posture_alerts(posture: NodePosture, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """The posture alerts of one node (one per matching entry or raised flag)."""
    found: list[Alert] = []
    for rule_id in POSTURE_RULE_IDS:
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
