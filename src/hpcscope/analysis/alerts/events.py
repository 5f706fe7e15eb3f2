"""The event rules over Falco and Tetragon rows: one engine, its state, merged alerts.

Rules as data (``deploy/rules/security-events.yaml``), declared in :data:`RULES` (and in any
module's ``RULES`` of kind ``event``: the registry, ``docs/development.md``). Falco alerts are
mapped (:mod:`hpcscope.analysis.alerts.falco`), Tetragon events evaluated by each registered
evaluator (:mod:`hpcscope.analysis.alerts.tetragon` for the rules here). Pure: no I/O, no
clock (times are the events'), the only state is what the rules remember between batches
(exec lineage, temp execs for SC-2's CRITICAL step, checkpoint creators), bounded.

Output: :class:`~hpcscope.model.alerts.Alert` values merged by deduplication key (the same
rule on the same job, node and subject is one alert whose ``count`` is its firings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import pyarrow as pa

from hpcscope.analysis.alerts.common import JobOwner, networks
from hpcscope.analysis.alerts.falco import FALCO_RULE_OF_VECTOR, FalcoRules, falco_alerts
from hpcscope.analysis.alerts.falco_meaning import FalcoMeaning
from hpcscope.analysis.alerts.node_rules import NodeRules
from hpcscope.analysis.alerts.packages import lock_entry
from hpcscope.analysis.alerts.tetragon import TetragonRules
from hpcscope.analysis.registry import registry
from hpcscope.model.alerts import Alert, RuleSpec, Vector, merge_alerts
from hpcscope.model.rules import ListCheck, Rule, RuleKind, distinct_evaluators
from hpcscope.model.security_events import FalcoRow, TetragonRow


class TetragonEvaluator(Protocol):
    """Evaluates Tetragon rows batch after batch (its state kept between batches)."""

    # rows: TETRAGON_EVENT_SCHEMA rows as pyarrow's to_pylist gives them (TetragonRules' type)
    def evaluate(
        self,
        rows: list[TetragonRow],
        *,
        owners: Mapping[str, JobOwner],
    ) -> list[Alert]:
        """Alerts the rows raise, in row order (not merged)."""
        ...


class TetragonFactory(Protocol):
    """The evaluator of an event rule: built once per engine from the site's enabled rules
    and the topology's checkpoint roots (:class:`~.tetragon.TetragonRules` is one)."""

    def __call__(
        self,
        rules: Mapping[str, RuleSpec],
        *,
        checkpoint_roots: tuple[str, ...],
        dataset_roots: tuple[str, ...],
    ) -> TetragonEvaluator: ...


def event_rule(
    rule_id: str,
    vector: Vector,
    evaluator: TetragonFactory | None,
    *,
    thresholds: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
    check: ListCheck | None = None,
) -> Rule:
    """An event rule's declaration (for a module's ``RULES``).

    Args:
        evaluator: what evaluates its Tetragon events; None for a rule raised only from
            Falco alerts (the rule-file entry's ``falco_rules``, or the rule id in a Falco
            rule's tags: :func:`~.falco.falco_alerts` maps them).
    """
    return Rule(
        rule_id,
        vector,
        RuleKind.EVENT,
        falco_alerts if evaluator is None else evaluator,
        thresholds=thresholds,
        lists=lists,
        check=check,
    )


def _check_sc5(spec: RuleSpec) -> list[str]:
    return [
        f"SC-5: {name} entry {entry!r} is not name==version"
        for name in ("lockfile", "known_bad")
        for entry in spec.items(name)
        if lock_entry(entry) is None
    ]


def _check_sc3(spec: RuleSpec) -> list[str]:
    errors: list[str] = []
    for cidr in (*spec.items("cluster_cidrs"), *spec.items("approved_proxies")):
        try:
            networks([cidr])
        except ValueError:
            errors.append(f"SC-3: {cidr!r} is not an address or CIDR")
    for port in spec.items("miner_ports"):
        if not port.isdigit() or not 0 < int(port) < 65536:
            errors.append(f"SC-3: miner port {port!r} is not a port number")
    return errors


_S, _R, _G, _C, _W = (
    Vector.SUPPLY_CHAIN, Vector.RDMA, Vector.GPU_MEMORY, Vector.CONTAINER_ESCAPE,
    Vector.DATA_POISONING,
)  # fmt: skip

#: The event rules Falco's mapping, :class:`~.tetragon.TetragonRules` (a job's processes) and
#: :class:`~.node_rules.NodeRules` (the node, in a job or not) raise; the ``-FAL`` rules carry
#: the Falco alerts of a vector that no hpcscope rule's condition covers
#: (``deploy/rules/falco/meaning.yaml``).
RULES: tuple[Rule, ...] = (
    event_rule("SC-1", _S, TetragonRules,
               lists=("python_names", "shells", "network_tools", "jit_toolchain")),
    event_rule("SC-2", _S, NodeRules, thresholds=("connect_window_seconds",),
               lists=("temp_prefixes", "temp_substrings", "known_temp_substrings")),
    event_rule("SC-3", _S, NodeRules, check=_check_sc3,
               lists=("cluster_cidrs", "approved_proxies", "resolvers", "miner_ports",
                      "remote_copy_tools")),
    event_rule("SC-5", _S, TetragonRules, lists=("lockfile", "known_bad"), check=_check_sc5),
    event_rule("SC-6", _S, TetragonRules, thresholds=("follow_seconds",),
               lists=("weight_suffixes", "world_writable_prefixes")),
    event_rule("SC-8", _S, NodeRules, lists=("reverse_shell_tools", "netcat_tools")),
    event_rule("CE-1", _C, NodeRules,
               lists=("module_functions", "module_loaders", "module_dirs", "taints")),
    event_rule("CE-2", _C, NodeRules, lists=("toolkit_binaries", "env_vars")),
    event_rule("CE-3", _C, NodeRules, lists=("container_starters",)),
    event_rule("CE-4", _C, NodeRules,
               lists=("host_only_prefixes", "secret_paths", "secret_readers",
                      "sensitive_write_prefixes", "sensitive_writers")),
    event_rule("CE-6", _C, NodeRules, lists=("privilege_tools",)),
    event_rule("DP-6", _W, NodeRules),
    event_rule("GM-3", _G, TetragonRules, lists=("trace_functions", "owner_tools")),
    event_rule("RD-4", _R, TetragonRules, lists=("device_prefixes", "daemons")),
    event_rule("RD-8", _R, NodeRules, lists=("raw_socket_tools",)),
    event_rule("W-1", _W, TetragonRules, lists=("service_accounts",)),
    event_rule("W-3", _W, TetragonRules),
    *(event_rule(rule_id, vector, None) for vector, rule_id in FALCO_RULE_OF_VECTOR.items()),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class EventVerdict:
    """What one batch raised.

    Attributes:
        alerts: merged by deduplication key.
        falco_rows: Falco alerts read; ``falco_unmapped`` of them no rule took over,
            ``falco_benign`` recognised harmless (the meaning table's benign cases).
        tetragon_rows: Tetragon events read.
    """

    alerts: list[Alert]
    falco_rows: int
    falco_unmapped: int
    tetragon_rows: int
    falco_benign: int = 0


class EventRules:
    """The event rules of one site, evaluated batch after batch.

    Args:
        rules: the site's rules by id (the event rules among them are used).
        checkpoint_roots: path prefixes of the checkpoints W-1/W-3 watch (the topology's).
        dataset_roots: the topology's dataset roots (DP-6).
        meaning: what each Falco rule means (``deploy/rules/falco/meaning.yaml``); None:
            every Falco rule read at its priority.
        registered: the event rules declared in code (default: the registry's); each
            distinct evaluator among them is built once and sees every Tetragon row.

    Raises:
        ValueError: a CIDR of SC-3's ``cluster_cidrs`` that does not parse.
    """

    def __init__(
        self,
        rules: Mapping[str, RuleSpec],
        *,
        checkpoint_roots: Sequence[str],
        dataset_roots: Sequence[str] = (),
        meaning: FalcoMeaning | None = None,
        registered: Sequence[Rule] | None = None,
    ) -> None:
        declared = registry().of_kind(RuleKind.EVENT) if registered is None else registered
        ids = {r.rule_id for r in declared}
        self.rules = {k: v for k, v in rules.items() if k in ids}
        roots, datasets = tuple(checkpoint_roots), tuple(dataset_roots)
        self.falco = FalcoRules(self.rules, meaning or FalcoMeaning(), dataset_roots=datasets)
        self.tetragon = [
            cast(TetragonFactory, factory)(
                self.rules, checkpoint_roots=roots, dataset_roots=datasets
            )
            for factory in distinct_evaluators(declared)
            if factory is not falco_alerts
        ]

    def evaluate(
        self, falco: pa.Table, tetragon: pa.Table, *, owners: Mapping[str, JobOwner]
    ) -> EventVerdict:
        """Alerts raised by one batch of Falco alerts and Tetragon events.

        Args:
            falco: rows of :data:`~hpcscope.model.security_events.FALCO_ALERT_SCHEMA`.
            tetragon: rows of :data:`~hpcscope.model.security_events.TETRAGON_EVENT_SCHEMA`,
                in the order Tetragon wrote them.
            owners: job id -> owner (user, account) from the store's jobs.
        """
        return self.evaluate_rows(
            cast(list[FalcoRow], falco.to_pylist()),
            cast(list[TetragonRow], tetragon.to_pylist()),
            owners=owners,
        )

    def evaluate_rows(
        self,
        falco_rows: list[FalcoRow],
        tetragon_rows: list[TetragonRow],
        *,
        owners: Mapping[str, JobOwner],
    ) -> EventVerdict:
        """:meth:`evaluate` on rows already read out of their tables (the engine reads them
        once for the rules and the access records)."""
        from_falco = self.falco.evaluate(falco_rows, owners=owners)
        from_tetragon = [
            alert
            for evaluator in self.tetragon
            for alert in evaluator.evaluate(tetragon_rows, owners=owners)
        ]
        return EventVerdict(
            alerts=merge_alerts([*from_falco.alerts, *from_tetragon]),
            falco_rows=len(falco_rows),
            falco_unmapped=from_falco.unmapped,
            tetragon_rows=len(tetragon_rows),
            falco_benign=from_falco.benign,
        )
