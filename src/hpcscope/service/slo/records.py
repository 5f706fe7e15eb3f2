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


def _slurm_cause(state: str | None, exit_code: int | None) -> str | None:
    head = (state or "").split(" ")[0].upper()
    if head not in _FINISHED:
        return None
    return exit_cause(head, exit_code, xid=None).value


def job_records(store: Store, scope: JobScope, *, since: datetime | None) -> pl.DataFrame:
    """The scope's job records that may hold an event after ``since`` (``events`` input)."""
    frame = pl.from_arrow(slo_job_records(store, scope, since=since))
    assert isinstance(frame, pl.DataFrame)
    # one call per distinct (state, exit code), not per job: a store holds many jobs, few pairs
    pairs = frame.select("state", "exit_code").unique()
    causes = pairs.with_columns(
        pl.Series(
            "slurm_cause",
            [_slurm_cause(r["state"], r["exit_code"]) for r in pairs.iter_rows(named=True)],
            pl.String,
        )
    )
    return (
        frame.join(causes, on=["state", "exit_code"], how="left", nulls_equal=True)
        .with_columns(
            pl.when(pl.col("end_time").is_null())
            .then(pl.col("summary_exit_cause"))
            .otherwise(pl.coalesce("summary_exit_cause", "slurm_cause"))
            .alias("exit_cause")
        )
        .drop("slurm_cause")
        .sort("job_id")
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
