"""Job records for the SLOs, read in a scope, with each ended job's exit cause.

The cause is the kept summary's (``exit_cause`` split by the Xid seen on the job's GPUs) when
the job has one, else :func:`~hpcscope.analysis.jobs.summary.exit_cause` of Slurm's final state
and exit code without Xid (the same function the summaries use): a job ended a minute ago
counts before the upkeep has summarised it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from hpcscope.analysis.jobs.summary import exit_cause
from hpcscope.analysis.slo import events as slo_events
from hpcscope.model.access import JobScope
from hpcscope.service.slo.config import GPU_EFFICIENCY, JOB_SUCCESS, QUEUE_WAIT, SloConfig
from hpcscope.store import Store
from hpcscope.store.slo import slo_job_records
from hpcscope.store.summaries import FINISHED_STATES

_FINISHED = frozenset(FINISHED_STATES)


def _cause(row: dict[str, object]) -> str | None:
    if row["summary_exit_cause"] is not None:
        return str(row["summary_exit_cause"])
    state = str(row["state"] or "").split(" ")[0].upper()
    if state not in _FINISHED or row["end_time"] is None:
        return None
    code = row["exit_code"]
    return exit_cause(state, None if code is None else int(str(code)), xid=None).value


def job_records(store: Store, scope: JobScope, *, since: datetime | None) -> pl.DataFrame:
    """The scope's job records that may hold an event after ``since`` (``events`` input)."""
    frame = pl.from_arrow(slo_job_records(store, scope, since=since))
    assert isinstance(frame, pl.DataFrame)
    return frame.with_columns(
        pl.Series("exit_cause", [_cause(r) for r in frame.iter_rows(named=True)], pl.String)
    )


@dataclass(frozen=True, slots=True)
class SloEvents:
    """Every SLO's events over the same records."""

    records: pl.DataFrame
    by_slo: dict[str, pl.DataFrame]


def slo_events_of(records: pl.DataFrame, config: SloConfig, *, now: datetime) -> SloEvents:
    """The three SLOs' events of ``records`` at ``now``."""
    return SloEvents(
        records=records,
        by_slo={
            QUEUE_WAIT: slo_events.queue_wait_events(
                records, threshold_seconds=config.queue_wait_seconds, now=now
            ),
            JOB_SUCCESS: slo_events.success_events(records),
            GPU_EFFICIENCY: slo_events.efficiency_events(records),
        },
    )
