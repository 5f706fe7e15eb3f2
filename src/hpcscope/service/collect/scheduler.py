"""The scheduler collector: Slurm's records of jobs, allocations and accounts into the store.

Two ways to ask Slurm, same result:

* :class:`SlurmrestdSource`: ``GET /slurm/<version>/jobs`` (TCP with a JWT, or a UNIX socket
  with ``rest_auth/local``), parsed by :func:`~hpcscope.ingest.slurm.parse_slurmrestd_jobs`;
* :class:`CommandSource`: ``squeue --json`` for live jobs (with ``gres_detail``: the GPU indices)
  and ``sacct --parsable2`` for finished ones (needs slurmdbd), run on the server.

:class:`AssociationSource` runs ``sacctmgr`` for user -> account memberships and coordinators.

:class:`SchedulerCollector.collect_once` writes through the store's merges (jobs upsert,
allocation merge, aliases), ends the allocations of finished jobs, and records every poll in
``scrapes``. A poll that fails (slurmrestd down, a truncated document) stores nothing from that
poll and keeps everything stored before; the error is in ``scrapes.error`` and the log.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, cast

import httpx2
import polars as pl
import pyarrow as pa

from hpcscope.ingest.slurm import (
    HPCSCOPE_FIELDS,
    SchedulerFormatError,
    SchedulerSnapshot,
    account_memberships,
    parse_sacct_parsable2,
    parse_sacctmgr_parsable,
    parse_slurmrestd_jobs,
)
from hpcscope.ingest.tls import default_tls_context
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.store import Store
from hpcscope.store.slurm import close_open_allocations, merge_allocations, upsert_aliases

log = logging.getLogger(__name__)


class SchedulerSource(Protocol):
    """Something that returns Slurm's current view of jobs."""

    name: str

    def fetch(self) -> SchedulerSnapshot:
        """One poll. Raises :class:`SourceError` (or ``OSError``) when it cannot."""
        ...


@dataclass
class SlurmrestdSource:
    """slurmrestd's job list.

    Args:
        url: base URL (``http://slurmctl:6820``); with ``unix_socket`` the host part is ignored.
        version: the OpenAPI plugin to ask (``v0.0.40``; Debian's 22.05 serves ``v0.0.38``).
        unix_socket: path of slurmrestd's UNIX socket (``rest_auth/local``).
        user, token: ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN`` for ``rest_auth/jwt``.
        timeout_seconds: per request.
    """

    url: str
    version: str = "v0.0.40"
    unix_socket: str | None = None
    user: str | None = None
    token: str | None = None
    timeout_seconds: float = 10.0
    name: str = "slurmrestd"
    live_view: bool = True  # /jobs lists every job slurmctld holds

    def _client(self) -> httpx2.Client:
        headers = {}
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        if self.token:
            headers["X-SLURM-USER-TOKEN"] = self.token
        transport = httpx2.HTTPTransport(uds=self.unix_socket) if self.unix_socket else None
        return httpx2.Client(
            base_url=self.url,
            headers=headers,
            transport=transport,
            timeout=self.timeout_seconds,
            verify=default_tls_context(),  # a client per poll, not a TLS context per poll
        )

    def get(self, path: str) -> bytes:
        """GET a path of slurmrestd; raises :class:`SourceError` on HTTP errors."""
        with self._client() as client:
            try:
                response = client.get(path)
            except httpx2.HTTPError as exc:
                raise SourceError(f"request failed: {exc}", source=self.url + path) from None
        if response.status_code != 200:
            raise SourceError(
                f"HTTP {response.status_code}: {response.text[:200]}", source=self.url + path
            )
        return response.content

    def fetch(self) -> SchedulerSnapshot:
        path = f"/slurm/{self.version}/jobs"
        return parse_slurmrestd_jobs(self.get(path), source=f"{self.url}{path}")


Runner = Callable[[Sequence[str]], str]


def run_command(args: Sequence[str], *, timeout_seconds: float = 30.0) -> str:
    """Run a Slurm command (``TZ=UTC``, ``SLURM_TIME_FORMAT=standard``) and return stdout."""
    import os

    env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
    try:
        done = subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout_seconds, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"could not run: {exc}", source=" ".join(args)) from None
    if done.returncode != 0:
        raise SourceError(
            f"exited {done.returncode}: {done.stderr.strip()[:300]}", source=" ".join(args)
        )
    return done.stdout


@dataclass
class CommandSource:
    """``squeue --json`` (live jobs and their GPU indices) + ``sacct --parsable2`` (finished).

    Args:
        accounting: also run sacct (needs slurmdbd) for jobs finished since ``since_hours``.
        runner: runs a command and returns stdout (tests pass one bound to their cluster).
    """

    accounting: bool = True
    since_hours: float = 24.0
    runner: Runner = run_command
    name: str = "slurm-commands"
    live_view: bool = True  # squeue --all lists every job slurmctld holds

    def fetch(self) -> SchedulerSnapshot:
        squeue = ["squeue", "--all", "--json"]
        live = parse_slurmrestd_jobs(self.runner(squeue), source=" ".join(squeue))
        if not self.accounting:
            return live
        sacct = [
            "sacct",
            "--allusers",
            "--parsable2",
            "--noheader",
            "--duplicates",
            "--allocations",
            f"--starttime=now-{int(self.since_hours * 3600)}seconds",
            "--format",
            ",".join(HPCSCOPE_FIELDS),
        ]
        done = parse_sacct_parsable2(
            self.runner(sacct), source=" ".join(sacct), fields=HPCSCOPE_FIELDS
        ).snapshot
        # sacct last: a finished job's final state and exit code win over a live view that
        # may be a moment older
        return merge_snapshots(live, done)


def merge_snapshots(*snapshots: SchedulerSnapshot) -> SchedulerSnapshot:
    """One snapshot from several: one row per job, later snapshots' known fields winning."""
    jobs = pa.concat_tables([s.jobs for s in snapshots])
    if jobs.num_rows:
        frame = cast(pl.DataFrame, pl.from_arrow(jobs))
        merged = frame.group_by("job_id", maintain_order=True).agg(
            [pl.col(c).drop_nulls().last() for c in frame.columns if c != "job_id"]
        )
        jobs = merged.select(jobs.column_names).to_arrow().cast(jobs.schema)
    return SchedulerSnapshot(
        jobs=jobs,
        allocations=pa.concat_tables([s.allocations for s in snapshots]),
        warnings=[w for s in snapshots for w in s.warnings],
        aliases=pa.concat_tables([s.aliases for s in snapshots]),
    )


@dataclass
class AssociationSource:
    """``sacctmgr`` associations and coordinators."""

    cluster: str | None = None
    runner: Runner = run_command

    def fetch(self) -> pa.Table:
        users_cmd = [
            "sacctmgr",
            "--parsable2",
            "show",
            "user",
            "withassoc",
            "withcoord",
            "format=user,defaultaccount,account,cluster,coordinators",
        ]
        accounts_cmd = [
            "sacctmgr",
            "--parsable2",
            "show",
            "account",
            "withcoord",
            "format=account,coordinators",
        ]
        users = parse_sacctmgr_parsable(self.runner(users_cmd), source=" ".join(users_cmd))
        accounts = parse_sacctmgr_parsable(self.runner(accounts_cmd), source=" ".join(accounts_cmd))
        for warning in users.warnings + accounts.warnings:
            log.warning("%s", warning)
        return account_memberships(users.rows, users.rows + accounts.rows, cluster=self.cluster)


_HOLDING = frozenset({"RUNNING", "SUSPENDED"})


def apply_snapshot(
    store: Store, snapshot: SchedulerSnapshot, *, live_view_at: datetime | None = None
) -> int:
    """Write a scheduler snapshot through the store's merges.

    Jobs are upserted, allocations merged, raw-id aliases recorded (renaming rows stored under
    a raw id), and the open allocations of jobs that have ended are closed at their end time.

    Args:
        live_view_at: the snapshot is slurmctld's complete job list at this instant
            (slurmrestd ``/jobs``, ``squeue --json``): allocations of jobs it does not show
            holding GPUs are closed then, so a job that left the list without a recorded end
            never keeps a GPU. The Slurm user must see every job (no ``PrivateData=jobs``
            restriction), or other users' jobs lose their attribution, never gain a wrong one.

    Returns:
        The number of allocation rows added.
    """
    store.upsert_jobs(snapshot.jobs).result()
    added = merge_allocations(store, snapshot.allocations).result()
    upsert_aliases(store, snapshot.aliases).result()
    holding: set[str] = set()
    ended: list[tuple[str, object]] = []
    for row in snapshot.jobs.select(["job_id", "state", "end_time"]).to_pylist():
        if row["end_time"] is not None:
            ended.append((row["job_id"], row["end_time"]))
        elif row["state"] in _HOLDING:
            holding.add(str(row["job_id"]))
    if ended:  # one write for every job the poll saw ended
        store.close_allocations_of(ended).result()
    if live_view_at is not None:
        close_open_allocations(store, keep_job_ids=holding, end_time=live_view_at).result()
    return added


@dataclass
class PollResult:
    """What one poll did."""

    ok: bool
    jobs: int = 0
    allocations_added: int = 0
    warnings: list[SourceError] = field(default_factory=list)
    error: str | None = None


@dataclass
class SchedulerCollector:
    """Polls a :class:`SchedulerSource` into the store (call :meth:`collect_once` on a timer)."""

    store: Store
    source: SchedulerSource
    associations: AssociationSource | None = None
    clock: Callable[[], float] = time.time

    def collect_once(self) -> PollResult:
        started = time.monotonic()
        ts = from_epoch_seconds(self.clock())
        try:
            snapshot = self.source.fetch()
            memberships = self.associations.fetch() if self.associations else None
        except (SourceError, OSError) as exc:
            log.error("scheduler poll failed: %s", exc)
            self._record(ts, started, ok=False, samples=0, error=str(exc))
            return PollResult(ok=False, error=str(exc))
        for warning in snapshot.warnings:
            log.warning("%s", warning)
        live = ts if getattr(self.source, "live_view", False) else None
        added = apply_snapshot(self.store, snapshot, live_view_at=live)
        if memberships is not None and memberships.num_rows > 0:
            self.store.replace_account_memberships(memberships).result()
        self._record(ts, started, ok=True, samples=snapshot.jobs.num_rows, error=None)
        return PollResult(
            ok=True,
            jobs=snapshot.jobs.num_rows,
            allocations_added=added,
            warnings=snapshot.warnings,
        )

    def _record(
        self, ts: datetime, started: float, *, ok: bool, samples: int, error: str | None
    ) -> None:
        row = pa.table(
            {
                "ts": [ts],
                "target": [getattr(self.source, "url", self.source.name)],
                "exporter": [self.source.name],
                "node": [None],
                "ok": [ok],
                "duration_seconds": [time.monotonic() - started],
                "samples": [samples],
                "rejected_lines": [0],
                "error": [error],
            },
            schema=SCRAPE_SCHEMA,
        )
        self.store.append("scrapes", row).result()


__all__ = [
    "AssociationSource",
    "CommandSource",
    "PollResult",
    "SchedulerCollector",
    "SchedulerFormatError",
    "SlurmrestdSource",
    "apply_snapshot",
    "merge_snapshots",
    "run_command",
]


class BoundedPoll:
    """A scheduler poll that never holds up GPU collection.

    :meth:`SchedulerCollector.collect_once` runs on a worker thread; the cycle that starts it
    waits for it at most ``wait_seconds``. A controller that hangs (stopped, overloaded:
    ``squeue`` and slurmrestd then wait for their own timeouts) leaves the poll in flight, the
    cycles go on scraping without waiting, and a later cycle takes the result; no second poll
    starts meanwhile.
    """

    def __init__(self, collector: SchedulerCollector, *, wait_seconds: float) -> None:
        self.collector = collector
        self.wait_seconds = wait_seconds
        self._task: asyncio.Future[PollResult] | None = None

    @property
    def in_flight(self) -> bool:
        return self._task is not None

    async def poll(self, *, start: bool) -> PollResult | None:
        """Start a poll when ``start`` and none is in flight; the finished result, or None."""
        wait_seconds = 0.0  # a poll left in flight by an earlier cycle is only looked at
        if self._task is None and start:
            self._task = asyncio.ensure_future(asyncio.to_thread(self.collector.collect_once))
            wait_seconds = self.wait_seconds
        if self._task is None:
            return None
        done, _ = await asyncio.wait({self._task}, timeout=wait_seconds)
        if not done:
            return None
        task, self._task = self._task, None
        return task.result()
