"""The rule registry's entries: every detection and health rule, declared once.

A :class:`Rule` is what the code knows about a rule: its id, threat vector, kind, the
evaluator that raises it, and what that evaluator reads from the rule file (threshold and
list names, and a check of the list values). Severity, title, thresholds and lists are data
(``deploy/rules/*.yaml``, read into :class:`~hpcscope.model.alerts.RuleSpec`), except for the
rules that have no entry there (``in_rule_file=False``: the SLO burn-rate alerts and the
collector's health alert, whose severity and title the code sets).

Rules are declared where they are evaluated: a module of ``hpcscope.analysis`` holds a
module-level ``RULES`` tuple of :class:`Rule`; :func:`hpcscope.analysis.registry.registry`
collects every such tuple into one :class:`RuleRegistry`. The id lists of each engine, the
validation of the rule files and the rules reference in the docs are derived from it
(``docs/development.md``, "A new rule").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from hpcscope.model.alerts import RuleSpec, Severity, Vector

#: What a rule id looks like (``SC-1``, ``RD-2b``, ``GI-ATTR``, ``SLO-PAGE``).
RULE_ID_PATTERN = r"^[A-Z]{1,4}-[A-Z0-9]{1,6}[a-z]?$"
_RULE_ID = re.compile(RULE_ID_PATTERN)


class RuleKind(StrEnum):
    """Which engine evaluates a rule, over what.

    Members:
        EVENT: Falco alerts and Tetragon events (``analysis/alerts/events.py``).
        POSTURE: a node's daily posture check (``analysis/alerts/posture.py``).
        CORRELATION: access records and other rules' alerts (``analysis/alerts/correlation.py``).
        TELEMETRY: InfiniBand counters, DCGM, NVML process lists, Lustre
            (``analysis/telemetry_rules/rules.py``).
        INTEGRITY: the training process' own records: gradient signals, ``torch.load`` and
            shard losses (``analysis/integrity/``).
        SLO_BURN: error-budget burn of the SLOs (``analysis/slo/burn.py``).
        HEALTH: hpcscope's own collection (``analysis/collection_health.py``).
    """

    EVENT = "event"
    POSTURE = "posture"
    CORRELATION = "correlation"
    TELEMETRY = "telemetry"
    INTEGRITY = "integrity"
    SLO_BURN = "slo-burn"
    HEALTH = "health"


#: Checks the values of a rule's lists; returns one message per value that cannot be used
#: (``"SC-3: '10.0.0.0/33' is not an address or CIDR"``), empty when all are good.
ListCheck = Callable[[RuleSpec], Iterable[str]]


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as the code declares it.

    Attributes:
        rule_id: ``SC-1``, ``RD-2b``... (:data:`RULE_ID_PATTERN`).
        vector: the threat vector (``SERVICE_LEVEL`` for SLO and health rules).
        kind: the engine that evaluates it.
        evaluator: the function or class that raises its alerts; an engine calls the
            evaluators of its kind (each once, however many rules it raises), with the
            signature that kind's engine documents.
        thresholds: the thresholds the evaluator reads (a rule-file entry must have them).
        lists: the lists the evaluator reads (present in the entry; they may be empty).
        check: a check of the list values, run when the rule files are loaded.
        in_rule_file: whether the rule has an entry in ``deploy/rules/*.yaml``.
        severity: the severity of a rule without a rule-file entry.
        title: the title of a rule without a rule-file entry (a line for the docs).
    """

    rule_id: str
    vector: Vector
    kind: RuleKind
    evaluator: Callable[..., object]
    thresholds: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    check: ListCheck | None = None
    in_rule_file: bool = True
    severity: Severity | None = None
    title: str | None = None

    def __post_init__(self) -> None:
        if _RULE_ID.match(self.rule_id) is None:
            raise ValueError(f"rule id {self.rule_id!r} does not match {RULE_ID_PATTERN}")
        if not self.in_rule_file and (self.severity is None or self.title is None):
            raise ValueError(f"rule {self.rule_id}: no rule-file entry, so severity and title")

    @property
    def evaluator_name(self) -> str:
        """``module.qualname`` of the evaluator (for messages and the docs)."""
        module = getattr(self.evaluator, "__module__", "?")
        name = getattr(self.evaluator, "__qualname__", repr(self.evaluator))
        return f"{module}.{name}"


def distinct_evaluators(rules: Iterable[Rule]) -> tuple[Callable[..., object], ...]:
    """The evaluators of ``rules``, each once (one evaluator may raise several rules), in
    order."""
    seen: list[Callable[..., object]] = []
    for rule in rules:
        if not any(rule.evaluator is s for s in seen):
            seen.append(rule.evaluator)
    return tuple(seen)


@dataclass(frozen=True)
class RuleRegistry:
    """Every declared rule, in declaration order; ids unique.

    Raises:
        ValueError: one rule id declared twice (both evaluators named).
    """

    rules: tuple[Rule, ...]
    _by_id: Mapping[str, Rule] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id: dict[str, Rule] = {}
        for rule in self.rules:
            other = by_id.get(rule.rule_id)
            if other is not None:
                raise ValueError(
                    f"rule {rule.rule_id} declared twice: by {other.evaluator_name} and "
                    f"{rule.evaluator_name}"
                )
            by_id[rule.rule_id] = rule
        object.__setattr__(self, "_by_id", by_id)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._by_id

    def get(self, rule_id: str) -> Rule | None:
        """The rule of that id, or None."""
        return self._by_id.get(rule_id)

    def of_kind(self, *kinds: RuleKind) -> tuple[Rule, ...]:
        """The rules of these kinds (all when none is given), in declaration order."""
        return tuple(r for r in self.rules if not kinds or r.kind in kinds)

    def ids(self, *kinds: RuleKind) -> tuple[str, ...]:
        """The ids of the rules of these kinds (all when none is given)."""
        return tuple(r.rule_id for r in self.of_kind(*kinds))

    def evaluators(self, kind: RuleKind) -> tuple[Callable[..., object], ...]:
        """The distinct evaluators of one kind, in declaration order."""
        return distinct_evaluators(self.of_kind(kind))

    def in_rule_files(self) -> tuple[Rule, ...]:
        """The rules configured in ``deploy/rules/*.yaml``."""
        return tuple(r for r in self.rules if r.in_rule_file)

    def required_thresholds(self) -> dict[str, tuple[str, ...]]:
        """Rule id -> the thresholds its evaluator needs."""
        return {r.rule_id: r.thresholds for r in self.rules if r.thresholds}

    def required_lists(self) -> dict[str, tuple[str, ...]]:
        """Rule id -> the lists its evaluator reads."""
        return {r.rule_id: r.lists for r in self.rules if r.lists}

    def list_errors(self, specs: Mapping[str, RuleSpec]) -> list[tuple[RuleSpec, str]]:
        """List values of ``specs`` that cannot be used, with the entry they are in."""
        errors: list[tuple[RuleSpec, str]] = []
        for rule in self.rules:
            spec = specs.get(rule.rule_id)
            if spec is not None and rule.check is not None:
                errors += [(spec, message) for message in rule.check(spec)]
        return errors
