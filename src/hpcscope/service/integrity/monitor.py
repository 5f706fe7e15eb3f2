"""Per-job evaluation: collect each step's records from all ranks, then run the GI rules.

Records arrive per rank file, in any order across ranks. A step is evaluated once: when every
rank of the job has reported it, or, incomplete, as soon as a later step is complete (a rank
that stopped reporting must not stall the others; GI-3 needs every rank and is then skipped
for that step). The signals of the last ``max(window_steps)`` steps are kept for the windowed
rules.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from hpcscope.analysis.integrity.rules import Finding, evaluate_step, signal_parameters
from hpcscope.analysis.integrity.signals import StepSignals, step_signals
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.integrity import IntegrityRecord


@dataclass(frozen=True, slots=True)
class StepFindings:
    """The findings of one evaluated step, with the records they rest on."""

    step: int
    findings: list[Finding]
    records: dict[int, IntegrityRecord]
    signals: StepSignals


@dataclass
class JobMonitor:
    """The rolling state of one job's integrity evaluation."""

    rules: Mapping[str, RuleSpec]
    pending: dict[int, dict[int, IntegrityRecord]] = field(default_factory=dict)
    history: deque[StepSignals] = field(default_factory=deque)
    evaluated_through: int = -1
    world_size: int = 0
    dropped: int = 0
    """Records that arrived for a step already evaluated (late or repeated)."""

    def add(self, record: IntegrityRecord) -> None:
        """Queue one record (a repeat of a step already evaluated is counted and dropped)."""
        if record.step <= self.evaluated_through:
            self.dropped += 1
            return
        self.world_size = max(self.world_size, record.world_size)
        self.pending.setdefault(record.step, {})[record.rank] = record

    def evaluate_ready(self) -> list[StepFindings]:
        """Evaluate every step that is ready, oldest first."""
        complete = [s for s, ranks in self.pending.items() if len(ranks) >= self.world_size]
        if not complete:
            return []
        through = max(complete)
        window = max((r.window_steps for r in self.rules.values()), default=1)
        parameters = signal_parameters(self.rules)
        out: list[StepFindings] = []
        for step in sorted(s for s in self.pending if s <= through):
            records = self.pending.pop(step)
            signals = step_signals(list(records.values()), parameters=parameters)
            self.history.append(signals)
            while self.history and self.history[0].step <= step - window:
                self.history.popleft()
            out.append(
                StepFindings(step, evaluate_step(list(self.history), self.rules), records, signals)
            )
            self.evaluated_through = step
        return out
