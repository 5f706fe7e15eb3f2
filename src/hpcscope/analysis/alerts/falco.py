"""Falco alerts -> hpcscope alerts: Falco decided, the rule file maps.

A Falco alert maps to an hpcscope rule when its ``tags`` carry the rule id (hpcscope's own
Falco rules, ``deploy/falco/hpcscope_rules.yaml``, tag every rule) or when its rule name is in
the rule's ``falco_rules`` list (Falco's stable rules). The alert's evidence keeps Falco's rule
name and output. Falco alerts no rule maps are counted, not raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpcscope.analysis.alerts.common import JobOwner, basename, event_alert
from hpcscope.model.alerts import Alert, RuleSpec, Severity

#: Rules whose alerts the Falco mapping may raise, and the subject each keys on.
_SUBJECT_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "SC-1": ("proc_name",),
    "SC-2": ("proc_exe", "proc_name"),
    "SC-3": ("fd_sip", "fd_rip"),
    "CE-1": ("proc_name",),
    "CE-2": ("proc_name",),
    "CE-3": ("proc_name",),
    "CE-4": ("fd_name", "proc_name"),
    "GM-3": ("proc_name",),
    "RD-4": ("proc_name",),
}


def falco_rule_index(rules: Mapping[str, RuleSpec]) -> dict[str, RuleSpec]:
    """Falco rule name -> the enabled hpcscope rule that takes it over."""
    index: dict[str, RuleSpec] = {}
    for spec in rules.values():
        if spec.enabled and spec.rule_id in _SUBJECT_COLUMNS:
            for name in spec.falco_rules:
                index.setdefault(name, spec)
    return index


def _spec_of(
    row: Mapping[str, Any], rules: Mapping[str, RuleSpec], index: Mapping[str, RuleSpec]
) -> RuleSpec | None:
    for tag in row.get("tags") or ():
        spec = rules.get(tag)
        if spec is not None and spec.enabled and spec.rule_id in _SUBJECT_COLUMNS:
            return spec
    return index.get(str(row["rule"]))


def _subject(spec: RuleSpec, row: Mapping[str, Any]) -> str:
    if spec.rule_id == "SC-3":
        address = row.get("fd_sip") or row.get("fd_rip")
        port = row.get("fd_sport") or row.get("fd_rport")
        if address:
            return f"{address}:{port}" if port is not None else str(address)
    for column in _SUBJECT_COLUMNS[spec.rule_id]:
        value = row.get(column)
        if value:
            return basename(value) if column == "proc_name" else str(value)
    return str(row["rule"])


def _owner_allowed(spec: RuleSpec, row: Mapping[str, Any]) -> bool:
    """GM-3: py-spy (and the site's owner tools) run by a non-root user inside a job is the
    owner profiling their own processes (the kernel lets a non-root user trace only their
    own), so it stays quiet even when Falco's stable ptrace rule fired."""
    if spec.rule_id != "GM-3":
        return False
    uid = row.get("user_uid")
    return (
        row.get("job_id") is not None
        and uid is not None
        and uid != 0
        and basename(row.get("proc_name")) in spec.items("owner_tools")
    )


def _severity(spec: RuleSpec, row: Mapping[str, Any]) -> Severity | None:
    if spec.rule_id != "SC-3":
        return None
    ports = {str(row.get(c)) for c in ("fd_sport", "fd_rport") if row.get(c) is not None}
    return Severity.CRITICAL if ports & set(spec.items("miner_ports")) else None


def falco_alerts(
    rows: list[dict[str, Any]],
    *,
    rules: Mapping[str, RuleSpec],
    owners: Mapping[str, JobOwner],
) -> tuple[list[Alert], int]:
    """The alerts Falco's rows raise, and how many rows no rule maps.

    Args:
        rows: rows of :data:`~hpcscope.model.security_events.FALCO_ALERT_SCHEMA`.
        rules: the site's rules by id.
        owners: job id -> owner, from the store's jobs.
    """
    index = falco_rule_index(rules)
    found: list[Alert] = []
    unmapped = 0
    for row in rows:
        spec = _spec_of(row, rules, index)
        if spec is None:
            unmapped += 1
            continue
        if _owner_allowed(spec, row):
            continue
        summary = f"Falco rule {row['rule']!r} ({row['priority']})"
        if row.get("output"):
            summary += f": {row['output']}"
        found.append(
            event_alert(
                spec,
                row,
                node=row.get("hostname"),
                owners=owners,
                subject=_subject(spec, row),
                summary=summary,
                event_user=row.get("user_name"),
                severity=_severity(spec, row),
            )
        )
    return found, unmapped
