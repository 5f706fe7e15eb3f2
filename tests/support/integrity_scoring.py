"""Scoring GI findings against the attacks the integrity ranks injected (tests and bench).

:func:`findings` replays a job's spool through the service's evaluation
(:class:`hpcscope.service.integrity.monitor.JobMonitor`, the rules of ``deploy/rules``);
:func:`score` turns the findings into the figures of ``security.md`` section 9 (T2): per
attacked step after the first ``grace`` attacked steps, whether a rule named the attacker;
per benign rank-step, whether a rule named that rank (or the whole job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpcscope.analysis.integrity.rules import Finding
from hpcscope.ingest.integrity.records import parse_lines
from hpcscope.model.alerts import RuleSpec
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.integrity.monitor import JobMonitor
from tests.support.integrity_ranks import Scenario

#: Which rules are expected to catch which attack.
CATCHES = {
    "scale": ("GI-1", "GI-2"),
    "signflip": ("GI-1", "GI-2"),
    "noise": ("GI-1", "GI-2"),
    "liar": ("GI-3",),
    "replica": ("GI-4",),
}


def site_rules() -> dict[str, RuleSpec]:
    return load_site_rules(None)


def findings(job_dir: Path, rules: Mapping[str, RuleSpec]) -> tuple[list[Finding], int]:
    """Every finding of a job's spool, and the number of steps evaluated.

    Raises:
        AssertionError: a spool line did not parse (the hook wrote something the reader
            refuses).
    """
    monitor = JobMonitor(rules)
    for path in sorted(job_dir.glob("rank-*.jsonl")):
        lines = list(enumerate(path.read_bytes().splitlines(), 1))
        parsed = parse_lines(lines, source=str(path))
        assert not parsed.errors, [e.describe() for e in parsed.errors[:3]]
        for record in parsed.records:
            monitor.add(record)
    evaluated = monitor.evaluate_ready()
    return [f for step in evaluated for f in step.findings], len(evaluated)


@dataclass(frozen=True)
class Score:
    """Detection figures of one run."""

    attacked_steps: int  # attacked steps scored (after the grace steps)
    detected_steps: int  # of those, steps at which a catching rule named the attacker
    first_detection: int | None  # first step a catching rule fired, relative to the start
    benign_rank_steps: int
    false_rank_steps: int  # benign rank-steps a rule named (job-level findings: one each)


def score(
    scenario: Scenario, found: list[Finding], steps: int, world: int, *, grace: int = 2
) -> Score:
    """Score one run's findings (``grace``: attacked steps before detection is required)."""
    attack = scenario.attack
    if attack is None:
        named = {(f.step, f.rank) for f in found}
        return Score(0, 0, None, steps * world, len(named))
    rules = CATCHES[attack.kind]
    hits = [f for f in found if f.rule_id in rules and f.rank in (attack.rank, None)]
    if attack.kind in ("scale", "signflip", "noise"):  # named rank required
        hits = [f for f in hits if f.rank == attack.rank]
    detected = {f.step for f in hits}
    scored = range(attack.start_step + grace, steps)
    first = min(detected) - attack.start_step if detected else None
    return Score(len(scored), sum(1 for s in scored if s in detected), first, 0, 0)
