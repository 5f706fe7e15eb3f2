"""What a page passes on about a job once it checked that its principal may see it, and how
long what is kept of a finished job stays current."""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import Principal

#: A finished job's report (and page) is recomputed at most this often: its samples are all in
#: and summarised; what may still change is its notes (and its alerts, keyed on their changes).
FINISHED_JOB_SECONDS = 60.0


def report_every_seconds(report: JobReport | None) -> float:
    """How long a job's kept report stays current whatever the generation (the snapshots'
    ``every_seconds``): :data:`FINISHED_JOB_SECONDS` once it ended, else one generation."""
    return FINISHED_JOB_SECONDS if report is not None and report.end_time is not None else 0.0


@dataclass(frozen=True, slots=True)
class SeenJob:
    """A job a principal may see, as :meth:`Service.visible_job` found it: the proof the reads
    of one page pass on instead of checking visibility again."""

    principal: Principal
    job_id: str
    ended: bool = False
    """The scheduler recorded its end: what is kept of it (its report, phases, alerts) stays
    current for :data:`FINISHED_JOB_SECONDS` whatever the generation (:meth:`every_seconds`)."""

    @property
    def every_seconds(self) -> float:
        """The snapshots' ``every_seconds`` for what is kept of this job."""
        return FINISHED_JOB_SECONDS if self.ended else 0.0
