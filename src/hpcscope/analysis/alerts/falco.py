"""Falco alerts -> hpcscope alerts: Falco decided that something happened, hpcscope says what
it means.

An alert maps three ways, first match wins:

1. its ``tags`` carry an hpcscope rule id: one of hpcscope's own Falco rules
   (``deploy/falco/hpcscope_rules.yaml``), which keep their rule's logic and severity;
2. a site's rule file names the Falco rule in an entry's ``falco_rules``: that rule;
3. the meaning table (:mod:`~hpcscope.analysis.alerts.falco_meaning`): the vector and severity
   floor of the Falco rule, raised to HIGH by hpcscope's own facts (a Python lineage in a job
   makes a shell SC-1; a peer outside the site's networks; a sensitive file; the host's ``/``
   mounted read-write...), not raised in its recognised harmless cases (runc's memfd
   self-exec, package managers under an image builder), and an unlisted rule at its priority.

Attribution is the node's (``hostname``), with the job, user and account when
``thread.cgroups`` names a Slurm job, and the container or pod the alert names in the
evidence. The evidence keeps Falco's rule name, priority and output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hpcscope.analysis.alerts.common import JobOwner, basename, event_alert, in_networks, networks
from hpcscope.analysis.alerts.falco_meaning import (
    HOST_MOUNT_SOURCES,
    IMAGE_BUILDERS,
    RUNTIME_SELF_EXEC,
    FalcoMeaning,
    FalcoRuleMeaning,
    mount_items,
)
from hpcscope.model.alerts import Alert, RuleSpec, Severity, Vector
from hpcscope.model.security_events import FalcoRow

Row = FalcoRow

#: The rule each vector's Falco alerts carry when no hpcscope rule is their condition.
FALCO_RULE_OF_VECTOR: Mapping[Vector, str] = {
    Vector.SUPPLY_CHAIN: "SC-FAL",
    Vector.DATA_POISONING: "DP-FAL",
    Vector.RDMA: "RD-FAL",
    Vector.GPU_MEMORY: "GM-FAL",
    Vector.CONTAINER_ESCAPE: "CE-FAL",
}

#: The subject each rule's alerts key on (the first column present).
_SUBJECT_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "SC-1": ("proc_name",),
    "SC-2": ("proc_exe", "proc_name"),
    "SC-3": ("fd_sip", "fd_rip"),
    "SC-8": ("proc_name",),
    "CE-1": ("proc_name",),
    "CE-2": ("proc_name",),
    "CE-3": ("proc_name",),
    "CE-4": ("fd_name", "proc_name"),
    "CE-6": ("proc_exe", "proc_name"),
    "GM-3": ("proc_name",),
    "RD-4": ("proc_name",),
    "RD-8": ("proc_name",),
    "DP-6": ("fd_name", "proc_name"),
}


@dataclass(frozen=True, slots=True)
class FalcoVerdict:
    """What the Falco rows raised.

    Attributes:
        alerts: one per alert raised (not merged).
        unmapped: rows no hpcscope rule took over (Falco's health reports, rules of no
            hpcscope vector, disabled rules).
        benign: rows recognised as harmless (:data:`~.falco_meaning.BENIGN`).
    """

    alerts: list[Alert] = field(default_factory=list)
    unmapped: int = 0
    benign: int = 0


def falco_rule_index(rules: Mapping[str, RuleSpec]) -> dict[str, RuleSpec]:
    """Falco rule name -> the enabled hpcscope rule a site's rule file maps it to."""
    index: dict[str, RuleSpec] = {}
    for spec in rules.values():
        if spec.enabled:
            for name in spec.falco_rules:
                index.setdefault(name, spec)
    return index


def _subject(rule_id: str, row: Row) -> str:
    if rule_id == "SC-3":
        address = row.get("fd_sip") or row.get("fd_rip")
        port = row.get("fd_sport") or row.get("fd_rport")
        if address:
            return f"{address}:{port}" if port is not None else str(address)
    for column in _SUBJECT_COLUMNS.get(rule_id, ()):
        value = row.get(column)
        if value:
            return basename(str(value)) if column == "proc_name" else str(value)
    name = basename(row.get("proc_name"))
    return f"{row['rule']}: {name}" if name else str(row["rule"])


def _owner_allowed(rule_id: str, spec: RuleSpec, row: Row) -> bool:
    """GM-3: py-spy (and the site's owner tools) run by a non-root user inside a job is the
    owner profiling their own processes (the kernel lets a non-root user trace only their
    own), so it stays quiet even when Falco's stable ptrace rule fired."""
    if rule_id != "GM-3":
        return False
    uid = row.get("user_uid")
    return (
        row.get("job_id") is not None
        and uid is not None
        and uid != 0
        and basename(row.get("proc_name")) in spec.items("owner_tools")
    )


class FalcoRules:
    """Falco alerts read with the site's rules and the meaning table.

    Args:
        rules: the site's enabled rules by id.
        meaning: the table; an empty one reads every rule at its priority.
        dataset_roots: the topology's dataset roots (``under_dataset_root``).
    """

    def __init__(
        self,
        rules: Mapping[str, RuleSpec],
        meaning: FalcoMeaning,
        *,
        dataset_roots: tuple[str, ...] = (),
    ) -> None:
        self.rules = {k: v for k, v in rules.items() if v.enabled}
        self._lists: dict[tuple[str, str], tuple[str, ...]] = {}
        self.meaning = meaning
        self.index = falco_rule_index(self.rules)
        self.dataset_roots = tuple(r.rstrip("/") + "/" for r in dataset_roots if r.strip("/"))
        sc3 = self.rules.get("SC-3")
        self._cluster = networks(sc3.items("cluster_cidrs")) if sc3 else ()

    def _items(self, rule_id: str, name: str) -> tuple[str, ...]:
        """A rule's list (read once: the rules do not change while the engine runs)."""
        found = self._lists.get((rule_id, name))
        if found is None:
            spec = self.rules.get(rule_id)
            found = self._lists[(rule_id, name)] = spec.items(name) if spec is not None else ()
        return found

    def evaluate(self, rows: list[FalcoRow], *, owners: Mapping[str, JobOwner]) -> FalcoVerdict:
        """The alerts ``rows`` (of :data:`~hpcscope.model.security_events.FALCO_ALERT_SCHEMA`)
        raise, with ``owners`` (job id -> owner from the store's jobs)."""
        verdict = FalcoVerdict()
        unmapped = benign = 0
        for row in rows:
            tagged = next((t for t in row.get("tags") or () if t in self.rules), None)
            if tagged is not None:
                self._raise(verdict, self.rules[tagged], row, owners, None)
                continue
            spec = self.index.get(str(row["rule"]))
            if spec is not None:
                self._raise(verdict, spec, row, owners, None)
                continue
            meaning = self.meaning.of(
                str(row["rule"]), priority=str(row["priority"]), tags=tuple(row.get("tags") or ())
            )
            if meaning is None or meaning.vector is None:
                unmapped += 1
                continue
            if self._benign(meaning, row):
                benign += 1
                continue
            spec, severity = self._read(meaning, row)
            if spec is None:
                unmapped += 1
                continue
            self._raise(verdict, spec, row, owners, severity, meaning)
        return FalcoVerdict(verdict.alerts, unmapped, benign)

    # ---------------------------------------------------------------- the table

    def _read(self, meaning: FalcoRuleMeaning, row: Row) -> tuple[RuleSpec | None, Severity]:
        """The rule and severity one table entry gives this row."""
        assert meaning.vector is not None
        severity, vector = meaning.severity, meaning.vector
        if meaning.falco not in self.meaning.rules and self._holds("sensitive_file", row):
            vector = Vector.CONTAINER_ESCAPE  # an unlisted rule about a CE-4 file: CE-4's vector
        rule_id = meaning.rule or FALCO_RULE_OF_VECTOR[vector]
        for fact in meaning.raises:
            if fact == "python_lineage_in_job" and self._python_lineage(row):
                rule_id, severity = "SC-1", max(severity, Severity.HIGH)
            elif self._holds(fact, row):
                severity = max(severity, Severity.HIGH)
        if rule_id == "SC-3":
            ports = {str(row.get(c)) for c in ("fd_sport", "fd_rport") if row.get(c) is not None}
            if ports & set(self._items("SC-3", "miner_ports")):
                severity = Severity.CRITICAL
        spec = self.rules.get(rule_id) or self.rules.get(FALCO_RULE_OF_VECTOR[vector])
        return spec, severity

    def _python_lineage(self, row: Row) -> bool:
        if row.get("job_id") is None:
            return False
        python = set(self._items("SC-1", "python_names"))
        return bool(python.intersection(row.get("proc_anames") or ()))

    def _holds(self, fact: str, row: Row) -> bool:
        if fact == "in_job":
            return row.get("job_id") is not None
        if fact == "peer_outside_cluster":
            peers = [row["fd_rip"], row["fd_sip"]]
            name = str(row.get("fd_name") or "")
            if "->" in name:
                peers.append(name.rsplit("->", 1)[1].rsplit(":", 1)[0])
            return any(in_networks(p, self._cluster) is False for p in peers if p)
        if fact == "sensitive_file":
            path = str(row.get("fd_name") or "")
            return path in self._items("CE-4", "secret_paths") or any(
                path.startswith(p) for p in self._items("CE-4", "sensitive_write_prefixes") if p
            )
        if fact == "under_dataset_root":
            text = f"{row.get('fd_name') or ''} {row.get('proc_cmdline') or ''}"
            return any(root in text for root in self.dataset_roots)
        if fact == "host_root_mount":
            return any(
                rw and source.rstrip("/") in {s.rstrip("/") for s in HOST_MOUNT_SOURCES}
                for source, _, rw in mount_items(row.get("container_mounts"))
            )
        return False

    def _benign(self, meaning: FalcoRuleMeaning, row: Row) -> bool:
        for case in meaning.benign:
            if case == "runtime_self_exec":
                exe = str(row.get("proc_exe") or "")
                if (
                    exe.startswith("memfd:runc_cloned")
                    or basename(row.get("proc_name")) in RUNTIME_SELF_EXEC
                ):
                    return True
            elif case == "image_build":
                ancestors = {basename(a) for a in row.get("proc_anames") or ()}
                if ancestors.intersection(IMAGE_BUILDERS):
                    return True
        return False

    # ---------------------------------------------------------------- raising

    def _raise(
        self,
        verdict: FalcoVerdict,
        spec: RuleSpec,
        row: Row,
        owners: Mapping[str, JobOwner],
        severity: Severity | None,
        meaning: FalcoRuleMeaning | None = None,
    ) -> None:
        if _owner_allowed(spec.rule_id, spec, row):
            return
        if severity is None and spec.rule_id == "SC-3":
            ports = {str(row.get(c)) for c in ("fd_sport", "fd_rport") if row.get(c) is not None}
            if ports & set(spec.items("miner_ports")):
                severity = Severity.CRITICAL
        summary = f"Falco rule {row['rule']!r} ({row['priority']})"
        if meaning is not None and meaning.why:
            summary += f"; hpcscope reads it as {meaning.why}"
        if row.get("output"):
            summary += f": {row['output']}"
        verdict.alerts.append(
            event_alert(
                spec,
                row,
                node=row.get("hostname"),
                owners=owners,
                subject=_subject(spec.rule_id, row),
                summary=summary,
                event_user=row.get("user_name"),
                severity=severity,
            )
        )


def falco_alerts(
    rows: list[FalcoRow],
    *,
    rules: Mapping[str, RuleSpec],
    owners: Mapping[str, JobOwner],
    meaning: FalcoMeaning | None = None,
) -> tuple[list[Alert], int]:
    """The alerts Falco's rows raise, and how many rows no rule took over (one batch, no
    state: :class:`FalcoRules` for the engine)."""
    verdict = FalcoRules(rules, meaning or FalcoMeaning()).evaluate(rows, owners=owners)
    return verdict.alerts, verdict.unmapped
