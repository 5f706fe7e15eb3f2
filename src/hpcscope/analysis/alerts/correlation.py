"""Correlation rules over access records and alerts: W-2 (weights read, then egress).

W-2 (``security.md`` §7, CRITICAL): job J reads the weights in bulk (more than
``bulk_read_bytes`` of checkpoint bytes within ``bulk_window_seconds``: the access records'
read and mmap bytes, the sensor's or Tetragon's) **or** raises one of ``trigger_rules`` (W-1:
another account's checkpoint), and within ``egress_within_seconds`` after that an alert of
``egress_rules`` (SC-3: a connection out of the cluster; RD-2: an InfiniBand residual) names J
or one of the nodes J read from. The rule is data (``deploy/rules/correlation.yaml``): the
trigger, the egress rules, the windows and the volume are the rule's lists and thresholds.

Limit: a connect event carries no volume and RD-2's alert carries none yet, so the
reference's "egress >= 0.5 x bytes read" is not checked: any egress alert in the window counts
(``egress_ratio`` is kept in the rule for when they do).

Pure: no clock (the events' times), bounded state (reads within the window, triggers and
egress alerts within the egress window, per job).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hpcscope.analysis.alerts.common import GPU_UNKNOWN, JobOwner
from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Vector
from hpcscope.model.rules import Rule, RuleKind

_MAX_JOBS = 4096


@dataclass(frozen=True, slots=True)
class Egress:
    """One egress alert as W-2 remembers it."""

    rule_id: str
    job_id: str | None
    node: str | None
    at: datetime
    summary: str


@dataclass
class _Trigger:
    at: datetime
    why: str
    nodes: set[str]
    source: str
    position: str | None
    fired: bool = False


@dataclass
class CorrelationState:
    """Reads per job within the bulk window, triggers and egress alerts within the egress one."""

    reads: dict[str, deque[tuple[datetime, int, str | None]]] = field(default_factory=dict)
    triggers: dict[str, _Trigger] = field(default_factory=dict)
    egress: list[Egress] = field(default_factory=list)


class CorrelationRules:
    """The correlation rules of one engine (W-2), with their state."""

    def __init__(self, rules: Mapping[str, RuleSpec]) -> None:
        spec = rules.get("W-2")
        self.spec = spec if spec is not None and spec.enabled else None
        self.state = CorrelationState()

    @property
    def egress_rules(self) -> tuple[str, ...]:
        return self.spec.items("egress_rules") if self.spec is not None else ()

    def evaluate(
        self,
        access: Iterable[Mapping[str, Any]],
        alerts: Sequence[Alert],
        *,
        owners: Mapping[str, JobOwner],
        egress: Sequence[Egress] = (),
    ) -> list[Alert]:
        """W-2 alerts raised by one batch.

        Args:
            access: access records of the batch (``ts``, ``job_id``, ``node``, ``access``,
                ``bytes``, ``path``, ``source_name``, ``source_line``), in time order.
            alerts: the batch's alerts (triggers and egress among them).
            owners: job id -> owner.
            egress: egress alerts raised elsewhere (stored by other engines: RD-2).
        """
        spec = self.spec
        if spec is None:
            return []
        bulk = spec.threshold("bulk_read_bytes")
        window = timedelta(seconds=spec.threshold("bulk_window_seconds"))
        within = timedelta(seconds=spec.threshold("egress_within_seconds"))
        newest: datetime | None = None
        for row in access:
            job = row.get("job_id")
            newest = row["ts"] if newest is None else max(newest, row["ts"])
            if job is None or row.get("access") not in ("read", "mmap") or not row.get("bytes"):
                continue
            reads = self.state.reads.setdefault(str(job), deque())
            reads.append((row["ts"], int(row["bytes"]), row.get("node")))
            while reads and row["ts"] - reads[0][0] > window:
                reads.popleft()
            total = sum(size for _, size, _ in reads)
            if total > bulk and str(job) not in self.state.triggers:
                nodes = {node for _, _, node in reads if node}
                why = (f"{total:,} bytes of checkpoints read within {window} "
                       f"(threshold {bulk:,.0f} bytes), last {row.get('path')}")  # fmt: skip
                self.state.triggers[str(job)] = _Trigger(
                    row["ts"], why, nodes, str(row["source_name"]), f"line {row['source_line']}"
                )
        triggers = set(spec.items("trigger_rules"))
        for alert in alerts:
            newest = alert.last_seen if newest is None else max(newest, alert.last_seen)
            if (
                alert.rule_id in triggers
                and alert.job_id
                and alert.job_id not in self.state.triggers
            ):
                first = alert.evidence[0] if alert.evidence else None
                self.state.triggers[alert.job_id] = _Trigger(
                    alert.first_seen, f"{alert.rule_id}: {alert.title}",
                    {alert.node} if alert.node else set(),
                    first.source if first else "alerts", first.position if first else None,
                )  # fmt: skip
            if alert.rule_id in self.egress_rules:
                summary = alert.evidence[0].summary if alert.evidence else alert.title
                self.state.egress.append(
                    Egress(alert.rule_id, alert.job_id, alert.node, alert.first_seen, summary)
                )
        self.state.egress.extend(egress)
        found = [self._fire(spec, job, t, within, owners) for job, t in self.state.triggers.items()]
        self._prune(newest, window, within)
        return [alert for alert in found if alert is not None]

    def _fire(
        self,
        spec: RuleSpec,
        job: str,
        trigger: _Trigger,
        within: timedelta,
        owners: Mapping[str, JobOwner],
    ) -> Alert | None:
        if trigger.fired:
            return None
        for egress in sorted(self.state.egress, key=lambda e: e.at):
            same = egress.job_id == job or (
                egress.node is not None and egress.node in trigger.nodes
            )
            if same and trigger.at <= egress.at <= trigger.at + within:
                trigger.fired = True
                owner = owners.get(job)
                node = egress.node or (sorted(trigger.nodes)[0] if trigger.nodes else None)
                return Alert(
                    rule_id=spec.rule_id,
                    vector=spec.vector,
                    severity=spec.severity,
                    title=spec.title,
                    first_seen=trigger.at,
                    last_seen=egress.at,
                    node=node,
                    job_id=job,
                    user=owner.user if owner else None,
                    account=owner.account if owner else None,
                    subject="weights read, then egress",
                    evidence=(
                        Evidence(f"{trigger.why}; {GPU_UNKNOWN}", trigger.source, trigger.position),
                        Evidence(
                            f"then {egress.rule_id} {egress.at - trigger.at} later: "
                            f"{egress.summary}",
                            "alerts",
                        ),
                    ),
                )
        return None

    def _prune(self, newest: datetime | None, window: timedelta, within: timedelta) -> None:
        if newest is None:
            return
        state = self.state
        for job in [
            j for j, reads in state.reads.items() if not reads or newest - reads[-1][0] > window
        ]:
            del state.reads[job]
        for job in [j for j, t in state.triggers.items() if newest - t.at > within]:
            del state.triggers[job]
        state.egress = [e for e in state.egress if newest - e.at <= 2 * within]
        while len(state.triggers) > _MAX_JOBS:
            del state.triggers[next(iter(state.triggers))]


RULES: tuple[Rule, ...] = (
    Rule(
        "W-2",
        Vector.DATA_POISONING,
        RuleKind.CORRELATION,
        CorrelationRules,
        thresholds=(
            "bulk_read_bytes", "bulk_window_seconds", "egress_within_seconds", "egress_ratio",
        ),
        lists=("trigger_rules", "egress_rules"),
    ),
)  # fmt: skip
