"""The event rules over Falco and Tetragon rows: one engine, its state, merged alerts.

Rules as data (``deploy/rules/security-events.yaml``): SC-1, SC-2, SC-3, SC-6, CE-1, CE-2, CE-3,
CE-4, GM-3, RD-4, W-1, W-3 (``security.md``). Falco alerts are mapped
(:mod:`hpcscope.analysis.alerts.falco`), Tetragon events evaluated
(:mod:`hpcscope.analysis.alerts.tetragon`). Pure: no I/O, no clock (times are the events'),
the only state is what the rules remember between batches (exec lineage, temp execs for
SC-2's CRITICAL step, checkpoint creators), bounded.

Output: :class:`~hpcscope.model.alerts.Alert` values merged by deduplication key (the same
rule on the same job, node and subject is one alert whose ``count`` is its firings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from hpcscope.analysis.alerts.common import JobOwner, networks
from hpcscope.analysis.alerts.falco import falco_alerts
from hpcscope.analysis.alerts.packages import lock_entry
from hpcscope.analysis.alerts.tetragon import TetragonRules
from hpcscope.model.alerts import Alert, RuleSpec, merge_alerts

#: Lists each event rule's evaluator reads (the loader rejects a rule file without them).
REQUIRED_LISTS: Mapping[str, tuple[str, ...]] = {
    "SC-1": ("python_names", "shells", "network_tools", "jit_toolchain"),
    "SC-2": ("temp_prefixes", "temp_substrings", "known_temp_substrings"),
    "SC-3": ("cluster_cidrs", "approved_proxies", "resolvers", "miner_ports"),
    "SC-5": ("lockfile", "known_bad"),
    "SC-6": ("weight_suffixes", "world_writable_prefixes"),
    "CE-1": ("module_functions",),
    "CE-2": ("toolkit_binaries", "env_vars"),
    "CE-3": ("setns_functions", "container_starters"),
    "CE-4": ("host_only_prefixes", "secret_paths"),
    "GM-3": ("trace_functions", "owner_tools"),
    "RD-4": ("device_prefixes", "daemons"),
    "W-1": ("service_accounts",),
}

#: Thresholds each event rule needs.
REQUIRED_THRESHOLDS: Mapping[str, tuple[str, ...]] = {
    "SC-2": ("connect_window_seconds",),
    "SC-6": ("follow_seconds",),
}

#: The rule ids this engine raises.
EVENT_RULE_IDS: tuple[str, ...] = (
    "SC-1", "SC-2", "SC-3", "SC-5", "SC-6", "CE-1", "CE-2", "CE-3", "CE-4", "GM-3", "RD-4",
    "W-1", "W-3",
)  # fmt: skip


def list_errors(rules: Mapping[str, RuleSpec]) -> list[tuple[RuleSpec, str]]:
    """Values of the event rules' lists that cannot be used (a CIDR or port that does not
    parse), with the rule they are in; empty when all are good."""
    errors: list[tuple[RuleSpec, str]] = []
    sc5 = rules.get("SC-5")
    if sc5 is not None:
        errors += [
            (sc5, f"SC-5: {name} entry {entry!r} is not name==version")
            for name in ("lockfile", "known_bad")
            for entry in sc5.items(name)
            if lock_entry(entry) is None
        ]
    sc3 = rules.get("SC-3")
    if sc3 is None:
        return errors
    for cidr in (*sc3.items("cluster_cidrs"), *sc3.items("approved_proxies")):
        try:
            networks([cidr])
        except ValueError:
            errors.append((sc3, f"SC-3: {cidr!r} is not an address or CIDR"))
    for port in sc3.items("miner_ports"):
        if not port.isdigit() or not 0 < int(port) < 65536:
            errors.append((sc3, f"SC-3: miner port {port!r} is not a port number"))
    return errors


@dataclass(frozen=True, slots=True)
class EventVerdict:
    """What one batch raised.

    Attributes:
        alerts: merged by deduplication key.
        falco_rows: Falco alerts read; ``falco_unmapped`` of them no rule took over.
        tetragon_rows: Tetragon events read.
    """

    alerts: list[Alert]
    falco_rows: int
    falco_unmapped: int
    tetragon_rows: int


class EventRules:
    """The event rules of one site, evaluated batch after batch.

    Args:
        rules: the site's rules by id (the event rules among them are used).
        checkpoint_roots: path prefixes of the checkpoints W-1/W-3 watch (the topology's).

    Raises:
        ValueError: a CIDR of SC-3's ``cluster_cidrs`` that does not parse.
    """

    def __init__(self, rules: Mapping[str, RuleSpec], *, checkpoint_roots: Sequence[str]) -> None:
        self.rules = {k: v for k, v in rules.items() if k in EVENT_RULE_IDS}
        self.tetragon = TetragonRules(self.rules, checkpoint_roots=tuple(checkpoint_roots))

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
        falco_rows = falco.to_pylist()
        tetragon_rows = tetragon.to_pylist()
        from_falco, unmapped = falco_alerts(falco_rows, rules=self.rules, owners=owners)
        from_tetragon = self.tetragon.evaluate(tetragon_rows, owners=owners)
        return EventVerdict(
            alerts=merge_alerts([*from_falco, *from_tetragon]),
            falco_rows=len(falco_rows),
            falco_unmapped=unmapped,
            tetragon_rows=len(tetragon_rows),
        )
