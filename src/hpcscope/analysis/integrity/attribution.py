"""GI-ATTR: a gradient record whose job, node or GPU the platform does not confirm. Pure.

The hook's records name a job, node and GPU: claims of the training process. The platform's
job for a record is the one holding the claimed node's GPU at the record's time (the service
looks it up in the allocations). A record whose platform job is not the job it claims (or for
which the platform knows no job) is a GI-ATTR finding on that rank.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpcscope.analysis.integrity.rules import Finding
from hpcscope.model.alerts import RuleSpec, Vector
from hpcscope.model.integrity import IntegrityRecord
from hpcscope.model.rules import Rule, RuleKind


def attribution_findings(
    spec: RuleSpec,
    records: Mapping[int, IntegrityRecord],
    platform_jobs: Mapping[int, str | None],
    claimed_jobs: Mapping[str, str],
) -> list[Finding]:
    """GI-ATTR findings of one step, in rank order (none when the rule is disabled).

    Args:
        spec: the rule.
        records: the step's records by rank.
        platform_jobs: rank -> the platform's job on the record's node and GPU at its time.
        claimed_jobs: each job label a record claims -> the job id it resolves to.
    """
    if not spec.enabled:
        return []
    found: list[Finding] = []
    for rank, record in sorted(records.items()):
        platform = platform_jobs[rank]
        if platform is not None and platform == claimed_jobs[record.job_id]:
            continue
        says = f"the platform maps {record.node} GPU {record.gpu} to " + (
            f"job {platform}" if platform else "no job"
        )
        found.append(
            Finding(
                "GI-ATTR", spec.severity, spec.title, record.step, rank,
                f"step {record.step}: rank {rank} claims job {record.job_id} on "
                f"{record.node} GPU {record.gpu}; {says}",
                lines=(f"{record.source}:{record.line}",),
            )
        )  # fmt: skip
    return found


RULES: tuple[Rule, ...] = (
    Rule("GI-ATTR", Vector.GRADIENT_INJECTION, RuleKind.INTEGRITY, attribution_findings),
)
