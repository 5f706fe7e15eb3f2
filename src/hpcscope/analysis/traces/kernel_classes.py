"""Kernel and operator classes: which events of a trace are communication, of which kind and
along which parallelism dimension, and which are compute.

The rules are data (``deploy/kernels/classes.yaml``, loaded by
:mod:`hpcscope.service.traces.kernel_classes`); this module is the pure matcher. A rule is a
regular expression searched in an event name, the events it applies to (``gpu``: kernels,
memcpy and memset; ``cpu``: CPU operators and ranges), the operation (``all_reduce``,
``all_to_all``, ``send``... or ``compute``) and the parallelism dimension (``dp``, ``tp``,
``ep``, ``pp`` or ``none``), and its role: ``transfer`` events are the communication itself (a
GPU kernel, a gloo worker's range), ``launch`` events are the CPU operators that enqueue it
(``c10d::alltoall_base_``, ``nccl:all_to_all``): they are not counted, they name the operation
and dimension of the transfer they launch (an NCCL ``SendRecv`` kernel launched under
``nccl:all_to_all`` is an expert all-to-all, not pipeline send/recv). The first matching rule
wins (site rules come before the bundled ones).

The reported class is a function of operation and dimension (:func:`report_class`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal, get_args

#: Operations a rule may name (the one list: the class file's model reads it too).
Operation = Literal[
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "send",
    "recv",
    "send_recv",
    "broadcast",
    "reduce",
    "barrier",
    "collective",
    "peer_copy",
    "compute",
]
Dimension = Literal["dp", "tp", "ep", "pp", "none"]
Role = Literal["transfer", "launch"]
EventKind = Literal["gpu", "cpu"]
OPS: tuple[Operation, ...] = get_args(Operation)
DIMENSIONS: tuple[Dimension, ...] = get_args(Dimension)
ROLES: tuple[Role, ...] = get_args(Role)
EVENTS: tuple[EventKind, ...] = get_args(EventKind)

#: Communication classes, in report order, with their labels.
CLASS_LABELS = {
    "dp_all_reduce": "data-parallel all-reduce",
    "dp_shard": "data-parallel reduce-scatter/all-gather",
    "dp_other": "data-parallel broadcast/reduce/barrier",
    "tp_collective": "tensor-parallel collectives",
    "ep_all_to_all": "expert all-to-all",
    "pp_send_recv": "pipeline send/recv",
    "peer_copy": "peer copies",
    "other_comm": "other communication",
}
COMM_CLASSES = tuple(CLASS_LABELS)
#: Operations whose exposed time is a pipeline bubble (the rank waits for another stage).
BUBBLE_OPS = ("recv", "send_recv")


def report_class(op: str, dimension: str) -> str:
    """The communication class of an operation along a dimension (``compute`` for compute)."""
    if op == "compute":
        return "compute"
    if dimension == "dp":
        if op == "all_reduce":
            return "dp_all_reduce"
        if op in ("reduce_scatter", "all_gather"):
            return "dp_shard"
        return "dp_other"
    if dimension == "tp":
        return "tp_collective"
    if dimension == "ep":
        return "ep_all_to_all"
    if dimension == "pp":
        return "pp_send_recv"
    return "peer_copy" if op == "peer_copy" else "other_comm"


@dataclass(frozen=True, slots=True)
class ClassRule:
    """One rule of a class table (see the module docstring).

    Attributes:
        pattern: regular expression searched in the event name.
        events: ``gpu`` or ``cpu``.
        op / dimension / role: see :data:`OPS`, :data:`DIMENSIONS`, :data:`ROLES`.
        library: what the rule is about (nccl, deepep...), shown nowhere but in the table.
        source: where the rule came from (file:line), for messages.
    """

    pattern: str
    events: str
    op: str
    dimension: str
    role: str = "transfer"
    library: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    """What a name is: operation, dimension, role, and the class they report as."""

    op: str
    dimension: str
    role: str

    @property
    def klass(self) -> str:
        return report_class(self.op, self.dimension)


class ClassTable:
    """An ordered rule list with a cached matcher (picklable: rules only travel)."""

    def __init__(self, rules: tuple[ClassRule, ...]) -> None:
        for rule in rules:
            if rule.op not in OPS or rule.dimension not in DIMENSIONS:
                raise ValueError(f"rule {rule.pattern!r}: unknown op or dimension")
            if rule.role not in ROLES or rule.events not in EVENTS:
                raise ValueError(f"rule {rule.pattern!r}: unknown role or events")
        self.rules = rules
        self._compiled = tuple(re.compile(r.pattern) for r in rules)
        # computed once: ``classify``'s cache hashes the table on every call, and hashing the
        # rules each time was most of classifying a small rank (issue 19)
        self._hash = hash(rules)

    def __reduce__(self) -> tuple[type[ClassTable], tuple[tuple[ClassRule, ...]]]:
        return (ClassTable, (self.rules,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClassTable) and other.rules == self.rules

    def __hash__(self) -> int:
        return self._hash

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 - tables live as long as the process
    def classify(self, name: str, events: str) -> Match | None:
        """The first rule for ``events`` whose pattern is found in ``name``; None: unclassified."""
        for rule, compiled in zip(self.rules, self._compiled, strict=True):
            if rule.events == events and compiled.search(name) is not None:
                return Match(rule.op, rule.dimension, rule.role)
        return None
