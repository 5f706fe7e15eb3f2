"""Alerts: the one model every detection rule writes to (security vectors 1-6).

An :class:`Alert` is what a rule concluded about one subject (a rank of a job, a GPU, a node):
its rule, threat vector and severity, when it was first and last seen and how many times, the
attribution (node, job, user, account, GPU) and evidence pointing at the raw events. Alerts are
deduplicated by :func:`dedup_key`: the same rule firing again on the same subject grows
``count`` and ``last_seen`` of one stored alert instead of adding another; its state (open,
acknowledged, resolved, with who and when) is kept.

Rules are data (:class:`RuleSpec`, loaded from ``deploy/rules/*.yaml`` by the service);
thresholds are starting values a site tunes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import IntEnum, StrEnum

from hpcscope.model.timeutil import iso_z


class Severity(IntEnum):
    """How urgent: LOW never pages, CRITICAL always does. Ordered (compare with ``>=``)."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, value: str | int | Severity) -> Severity:
        """``"HIGH"``, ``"high"``, ``3`` or a Severity.

        Raises:
            ValueError: not a severity name or number.
        """
        if isinstance(value, Severity):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.strip().upper()]
        except KeyError:
            names = ", ".join(s.name for s in cls)
            raise ValueError(f"unknown severity {value!r} (one of {names})") from None


class Vector(IntEnum):
    """The six threat vectors of the security reference (``security.md`` sections 1-6), and
    ``SERVICE_LEVEL`` (0): not a threat, the burn-rate alerts of the SLOs (``docs/slo.md``) and
    the collector's collection-health alert ``OPS-1`` (``docs/scraping.md``), which have no
    catalog id (:data:`VECTOR_NAMES` lists the six vectors only)."""

    SERVICE_LEVEL = 0
    SUPPLY_CHAIN = 1
    DATA_POISONING = 2
    RDMA = 3
    GRADIENT_INJECTION = 4
    GPU_MEMORY = 5
    CONTAINER_ESCAPE = 6


#: Relative weight of each vector when alerts of several vectors are ranked together
#: (priority = severity x weight). Starting values: code execution and escapes first, then
#: the paths to the weights, then integrity of the training itself.
VECTOR_WEIGHTS: Mapping[Vector, float] = {
    Vector.SERVICE_LEVEL: 0.5,
    Vector.SUPPLY_CHAIN: 1.0,
    Vector.DATA_POISONING: 0.8,
    Vector.RDMA: 0.9,
    Vector.GRADIENT_INJECTION: 0.8,
    Vector.GPU_MEMORY: 0.9,
    Vector.CONTAINER_ESCAPE: 1.0,
}


#: Each vector's id in the diagram's element catalog (``model/data/catalog.yaml``), the name
#: Threats mode and the diagram's counts use.
VECTOR_NAMES: Mapping[Vector, str] = {
    Vector.SUPPLY_CHAIN: "supply-chain",
    Vector.DATA_POISONING: "data-poisoning",
    Vector.RDMA: "rdma-blind-spot",
    Vector.GRADIENT_INJECTION: "gradient-injection",
    Vector.GPU_MEMORY: "gpu-memory-leakage",
    Vector.CONTAINER_ESCAPE: "container-escape",
}


class AlertState(StrEnum):
    """Where a person has taken an alert: open until acknowledged or resolved."""

    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of evidence: what it shows and where the raw event is.

    Attributes:
        summary: one line for a person (``"step 41: norm z 52.3, cos -0.98"``).
        source: the raw source (a spool file path, a Falco stream, a table).
        position: where inside it (``"line 42"``), when known.
        link: an address a person can open (``/api/...`` or ``file://...``), when there is one.
    """

    summary: str
    source: str
    position: str | None = None
    link: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "summary": self.summary,
            "source": self.source,
            "position": self.position,
            "link": self.link,
        }


def dedup_key(
    rule_id: str,
    *,
    job_id: str | None,
    node: str | None,
    gpu: int | None,
    subject: str | None,
) -> str:
    """The identity of an alert: the same rule on the same subject is one alert.

    A stable hex digest of the rule, job, node, GPU and subject (``"rank 3"``; None for a rule
    about the whole job).
    """
    parts = [rule_id, job_id or "", node or "", "" if gpu is None else str(gpu), subject or ""]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class Alert:
    """A rule's conclusion about one subject, with attribution and evidence.

    Attributes:
        rule_id: ``GI-1``, ``SC-2``, ...
        vector: the threat vector.
        severity: how urgent.
        title: one line for a person.
        first_seen: when the rule first fired on this subject (naive UTC).
        last_seen: when it last fired (naive UTC).
        count: how many times it fired (steps, events).
        node: the node, from the platform's attribution (a node-scoped alert has a node and
            no job).
        job_id: the Slurm job, from the platform's attribution (never self-reported alone).
        user: the job's user.
        account: the job's account.
        gpu: the GPU index on the node (dcgm-exporter's ``gpu`` label).
        subject: what inside the job (``"rank 3"``), or None.
        step: the training step (or event sequence number) of the last firing.
        evidence: what the rule saw, with links to the raw events.
        state: open, acknowledged or resolved.
        state_by: who set the state (None while open and untouched).
        state_at: when the state was set.
        container: the container the event ran in (its name, else its id), when the event
            names one (a Falco or Tetragon event; never for a process on the bare host).
        pod: the Kubernetes pod the event ran in, ``namespace/name``, when the event names one.
            Neither is part of the deduplication key: a repeat keeps the newest firing's.
    """

    rule_id: str
    vector: Vector
    severity: Severity
    title: str
    first_seen: datetime
    last_seen: datetime
    count: int = 1
    node: str | None = None
    job_id: str | None = None
    user: str | None = None
    account: str | None = None
    gpu: int | None = None
    subject: str | None = None
    step: int | None = None
    evidence: tuple[Evidence, ...] = field(default_factory=tuple)
    state: AlertState = AlertState.OPEN
    state_by: str | None = None
    state_at: datetime | None = None
    container: str | None = None
    pod: str | None = None

    @property
    def key(self) -> str:
        """The deduplication key (:func:`dedup_key`)."""
        return dedup_key(
            self.rule_id, job_id=self.job_id, node=self.node, gpu=self.gpu, subject=self.subject
        )

    @property
    def priority(self) -> float:
        """Severity times the vector's weight: for ranking alerts of several vectors."""
        return float(self.severity) * VECTOR_WEIGHTS[self.vector]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view (the API's and ``--json``'s schema)."""
        return {
            "key": self.key,
            "rule_id": self.rule_id,
            "vector": int(self.vector),
            "vector_name": self.vector.name.lower(),
            "severity": self.severity.name,
            "title": self.title,
            "first_seen": iso_z(self.first_seen),
            "last_seen": iso_z(self.last_seen),
            "count": self.count,
            "node": self.node,
            "container": self.container,
            "pod": self.pod,
            "job_id": self.job_id,
            "user": self.user,
            "account": self.account,
            "gpu": self.gpu,
            "subject": self.subject,
            "step": self.step,
            "evidence": [e.to_dict() for e in self.evidence],
            "state": self.state.value,
            "state_by": self.state_by,
            "state_at": None if self.state_at is None else iso_z(self.state_at),
        }


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """A detection rule as data (one entry of a ``deploy/rules/*.yaml`` file).

    Attributes:
        rule_id: ``GI-1``...
        vector: the threat vector it belongs to.
        severity: the severity of its alerts.
        title: one line for a person.
        window_steps: how many recent steps (or events) the rule looks at.
        min_hits: how many of them must match for the rule to fire.
        thresholds: the rule's named thresholds (``norm_z``, ``relative_error``...).
        enabled: a site can switch a rule off without deleting it.
        lists: the rule's named lists (allow-lists, path prefixes, CIDRs, ports), as strings.
        falco_rules: names of Falco rules (stable or hpcscope's) whose alerts this rule takes
            over; an alert of such a rule keeps Falco's rule name in its evidence.
        source: the file the rule came from, and ``line`` where it starts (for messages).
    """

    rule_id: str
    vector: Vector
    severity: Severity
    title: str
    window_steps: int = 1
    min_hits: int = 1
    thresholds: Mapping[str, float] = field(default_factory=dict)
    enabled: bool = True
    source: str = "<builtin>"
    line: int | None = None
    lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    falco_rules: tuple[str, ...] = ()

    def threshold(self, name: str) -> float:
        """One named threshold.

        Raises:
            KeyError: the rule has no such threshold (the loader checks required names).
        """
        return float(self.thresholds[name])

    def items(self, name: str) -> tuple[str, ...]:
        """One named list (empty when the rule has none by that name)."""
        return tuple(self.lists.get(name, ()))


#: Evidence items an alert keeps when firings of one deduplication key are merged.
MERGED_EVIDENCE = 5


def merge_alerts(alerts: Iterable[Alert]) -> list[Alert]:
    """One alert per deduplication key, in first-seen order: counts added, first/last seen
    widened, the highest severity kept, the newest evidence first (at most
    :data:`MERGED_EVIDENCE`). The one merge rule of every rule family (events, telemetry)."""
    merged: dict[str, Alert] = {}
    for alert in alerts:
        old = merged.get(alert.key)
        if old is None:
            merged[alert.key] = alert
            continue
        newer, older = (alert, old) if alert.last_seen >= old.last_seen else (old, alert)
        merged[alert.key] = replace(
            newer,
            count=old.count + alert.count,
            first_seen=min(old.first_seen, alert.first_seen),
            last_seen=newer.last_seen,
            severity=max(old.severity, alert.severity),
            evidence=(newer.evidence + older.evidence)[:MERGED_EVIDENCE],
        )
    return list(merged.values())
