"""Slurm: jobs, allocations and accounts, from slurmrestd or the Slurm commands.

Every ``poll_seconds`` (on the collector's clock) reads Slurm's jobs (slurmrestd's
``/jobs``, or ``squeue --json`` and ``sacct``) and, with ``associations``, ``sacctmgr``'s
associations into ``jobs``, ``job_allocations`` and ``account_memberships``
(``service/collect/scheduler.py``). A poll runs on a worker thread and a cycle waits for it
at most ``scrape_timeout_seconds``: a hung controller never holds up the exporter scrapes, a
later cycle takes the result (:class:`~hpcscope.service.collect.scheduler.BoundedPoll`).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.clock import Clock
from hpcscope.service.collect.scheduler import (
    AssociationSource,
    BoundedPoll,
    CommandSource,
    SchedulerCollector,
    SchedulerSource,
    SlurmrestdSource,
)
from hpcscope.service.collect.source import Batch, Health, Poll
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import SlurmSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.store import Store


class SlurmPoll:
    """Polls a :class:`SchedulerSource` on its own interval, never holding up a cycle.

    Args:
        store: where jobs, allocations and memberships go.
        scheduler: slurmrestd or the commands.
        associations: ``sacctmgr``, polled with the scheduler (None: not polled).
        poll_seconds: seconds between two polls (collector clock, monotonic).
        wait_seconds: longest a cycle waits for a poll it started.
        clock: the collector's clock.
    """

    name = "slurm"

    def __init__(
        self,
        store: Store,
        scheduler: SchedulerSource,
        associations: AssociationSource | None,
        *,
        poll_seconds: float,
        wait_seconds: float,
        clock: Clock,
    ) -> None:
        self.scheduler = scheduler
        self.associations = associations
        self.poll_seconds = poll_seconds
        self._clock = clock
        self._bounded = BoundedPoll(
            SchedulerCollector(store, scheduler, associations), wait_seconds=wait_seconds
        )
        self._last_start: float | None = None

    async def poll(self, now: datetime) -> Poll:
        monotonic = self._clock.monotonic()
        due = not self._bounded.in_flight and (
            self._last_start is None or monotonic - self._last_start >= self.poll_seconds
        )
        if due:
            self._last_start = monotonic
        result = await self._bounded.poll(start=due)
        if result is None:  # not due, or still in flight
            return Poll(Health(self.name, now, polled=False))
        errors = () if result.ok else (f"scheduler: {result.error}",)
        return Poll(Health(self.name, now, rows=result.jobs, jobs=result.jobs, errors=errors))

    async def settle(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        return ()


def scheduler_of(settings: Settings) -> SchedulerSource | None:
    """Where a site's settings say Slurm's jobs come from (None: nowhere)."""
    if settings.slurm.source == "slurmrestd" and settings.slurm.url:
        return SlurmrestdSource(
            url=settings.slurm.url,
            version=settings.slurm.api_version,
            unix_socket=settings.slurm.socket,
            user=settings.slurm.user,
            token=settings.slurm.token(),
            timeout_seconds=settings.scrape_timeout_seconds,
        )
    if settings.slurm.source == "commands":
        return CommandSource(accounting=settings.slurm.accounting)
    return None


def _configured(settings: Settings) -> bool:
    return settings.slurm.configured()


def _build(context: SourceContext) -> SlurmPoll:
    settings = context.settings
    scheduler = scheduler_of(settings)
    assert scheduler is not None  # _configured said so
    associations = (
        AssociationSource(cluster=settings.slurm.cluster) if settings.slurm.associations else None
    )
    return SlurmPoll(
        context.store,
        scheduler,
        associations,
        poll_seconds=settings.slurm.poll_seconds,
        wait_seconds=settings.scrape_timeout_seconds,
        clock=context.clock,
    )


SOURCE = SourceSpec(
    name="slurm",
    settings=SlurmSection,
    order=20,
    configured=_configured,
    build=_build,
    summary="Slurm's jobs, allocations and associations (slurmrestd or squeue/sacct)",
)
