"""Reading the integrity spool: ``<root>/<job>/rank-<rank>.jsonl``, attributing, alerting.

The hook (:mod:`hpcscope.integrity`) appends one line per step to its rank's file. Each cycle,
:meth:`IntegritySpool.collect_once` reads what was appended since the last read (complete lines
only: a line being written is read next time), parses it, feeds the job's
:class:`~.monitor.JobMonitor` and upserts the alerts of the rules that fired.

**Attribution.** The directory name, and the job, node and GPU in each line, are claims of the
training process. The job is re-derived from the platform's allocations (the prolog's mapping
files, Slurm): the job holding the claimed node's GPU at the record's time. An alert goes to
that job. When the platform names another job, or none, the alert ``GI-ATTR`` records the
mismatch (on the platform's job when there is one, else on the claimed job, whose page then
shows the claim was not confirmed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from hpcscope.analysis.integrity.attribution import attribution_findings
from hpcscope.analysis.integrity.rules import Finding
from hpcscope.ingest.integrity.records import parse_lines
from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Vector
from hpcscope.model.integrity import IntegrityRecord
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.service.integrity.monitor import JobMonitor, StepFindings
from hpcscope.service.integrity.training import TrainingEventsSpool
from hpcscope.service.spool import Tails
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store
from hpcscope.store.alerts import upsert_alerts

log = logging.getLogger(__name__)

PATTERN = "rank-*.jsonl"


@dataclass(frozen=True, slots=True)
class Placement:
    """Who the platform says ran on a node's GPU at a time."""

    job_id: str | None
    user: str | None
    account: str | None


@dataclass
class SpoolCycle:
    """What one pass over the spool did."""

    files_read: int = 0
    records: int = 0
    steps_evaluated: int = 0
    alerts: int = 0
    errors: list[str] = field(default_factory=list)


class IntegritySpool:
    """Reads a spool root of per-job directories and raises GI alerts into the store.

    Args:
        store: allocations are read from it, alerts written to it.
        root: the spool root (need not exist yet).
        rules: rule specs by id (``deploy/rules/gradient-integrity.yaml``).
        placement: (node, gpu, time) -> the platform's job; default: the store's allocations.
    """

    def __init__(
        self,
        store: Store,
        root: Path,
        rules: Mapping[str, RuleSpec],
        *,
        placement: Callable[[str, int | None, datetime], Placement] | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.rules = rules
        self.placement = placement or self._placement_from_store
        self._tails = Tails()  # complete lines, rotation: service/spool.py
        self._placements: dict[tuple[str, int | None, int], Placement] = {}
        self._labels: dict[str, str] = {}
        self.monitors: dict[str, JobMonitor] = {}
        self.training = TrainingEventsSpool(store, root, rules)  # W-4, DP-5 (training.py)

    # ------------------------------------------------------------------ reading

    def _new_lines(self, path: Path) -> list[tuple[int, bytes]]:
        try:
            return self._tails.read(path).numbered()
        except OSError as exc:
            raise OSError(f"{path}: cannot read: {exc.strerror or exc}") from None

    def collect_once(self) -> SpoolCycle:
        """Read every job directory's new lines, evaluate ready steps, upsert alerts."""
        cycle = SpoolCycle()
        self._placements.clear()  # allocations and aliases may have changed since the last cycle
        self._labels.clear()
        try:
            job_dirs = sorted(p for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return cycle
        alerts: list[Alert] = []
        for job_dir in job_dirs:
            monitor = self.monitors.get(job_dir.name)
            if monitor is None:
                monitor = self.monitors[job_dir.name] = JobMonitor(self.rules)
            for path in sorted(job_dir.glob(PATTERN)):
                try:
                    lines = self._new_lines(path)
                except OSError as exc:
                    cycle.errors.append(str(exc))
                    continue
                cycle.files_read += 1
                parsed = parse_lines(lines, source=str(path))
                for error in parsed.errors:
                    cycle.errors.append(error.describe())
                    log.warning("%s", error.describe())
                for record in parsed.records:
                    monitor.add(record)
                cycle.records += len(parsed.records)
            for evaluated in monitor.evaluate_ready():
                cycle.steps_evaluated += 1
                alerts.extend(self._alerts(job_dir.name, evaluated))
        if alerts:
            cycle.alerts = upsert_alerts(self.store, alerts).result()
        training = self.training.collect_once()
        cycle.alerts += training.alerts
        cycle.errors += training.errors
        return cycle

    # ------------------------------------------------------------------ attribution

    def _placement_from_store(self, node: str, gpu: int | None, at: datetime) -> Placement:
        rows = slurm_store.allocations_between(self.store, at, at).to_pylist()
        for row in rows:
            if row["node"] == node and (gpu is None or row["gpu"] == gpu):
                return Placement(row["job_id"], row["user"], row["account"])
        return Placement(None, None, None)

    def _place(self, node: str, gpu: int | None, ts: float) -> Placement:
        """The platform's job on (node, GPU) at ``ts``, cached per cycle and minute (one
        query per GPU and minute, not per record)."""
        key = (node, gpu, int(ts // 60))
        found = self._placements.get(key)
        if found is None:
            found = self._placements[key] = self.placement(node, gpu, from_epoch_seconds(ts))
        return found

    def _alerts(self, claimed_dir: str, evaluated: StepFindings) -> list[Alert]:
        records = evaluated.records
        placements = {rank: self._place(r.node, r.gpu, r.ts) for rank, r in records.items()}
        labels = {claimed_dir, *(r.job_id for r in records.values())}
        missing = sorted(labels - set(self._labels))
        if missing:  # raw Slurm ids -> job ids, once per cycle
            self._labels.update(slurm_store.job_id_for_labels(self.store, missing))
        resolved = self._labels
        platform_jobs = {p.job_id for p in placements.values() if p.job_id is not None}
        # the job of the step: what the platform says (the majority of its ranks' GPUs)
        votes = [p.job_id for p in placements.values() if p.job_id is not None]
        job_id = max(sorted(platform_jobs), key=votes.count) if votes else None
        placement = next((p for p in placements.values() if p.job_id == job_id), None)
        alerts: list[Alert] = []
        for finding in evaluated.findings:
            record = records.get(finding.rank) if finding.rank is not None else None
            alerts.append(
                self._alert(finding, record, evaluated, job_id or resolved[claimed_dir], placement)
            )
        attr = self.rules.get("GI-ATTR")
        if attr is not None:
            platform = {rank: p.job_id for rank, p in placements.items()}
            for finding in attribution_findings(attr, records, platform, resolved):
                assert finding.rank is not None
                record = records[finding.rank]
                target = platform[finding.rank] or resolved[record.job_id]
                alerts.append(
                    self._alert(finding, record, evaluated, target, placements[finding.rank])
                )
        return alerts

    def _alert(
        self,
        finding: Finding,
        record: IntegrityRecord | None,
        evaluated: StepFindings,
        job_id: str,
        placement: Placement | None,
    ) -> Alert:
        rule = self.rules[finding.rule_id]
        seen = from_epoch_seconds(
            record.ts if record is not None else max(r.ts for r in evaluated.records.values())
        )
        named = [record] if record is not None else list(evaluated.records.values())
        evidence = [Evidence(finding.summary, source="integrity spool")]
        evidence.extend(
            Evidence(
                f"rank {r.rank} step {r.step}: norm {r.norm():.4g}",
                source=r.source,
                position=f"line {r.line}",
                link=f"file://{r.source}#L{r.line}",
            )
            for r in sorted(named, key=lambda r: r.rank)
        )
        subject = None
        if finding.rank is not None:
            subject = f"rank {finding.rank}" + (" (suspected)" if finding.suspected else "")
        return Alert(
            rule_id=finding.rule_id,
            vector=Vector(rule.vector),
            severity=rule.severity,
            title=rule.title,
            first_seen=seen,
            last_seen=seen,
            count=1,
            node=record.node if record is not None else None,
            job_id=job_id,
            user=placement.user if placement is not None else None,
            account=placement.account if placement is not None else None,
            gpu=record.gpu if record is not None else None,
            subject=subject,
            step=finding.step,
            evidence=tuple(evidence),
        )
