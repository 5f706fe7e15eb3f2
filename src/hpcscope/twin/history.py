"""A month of the twin cluster's past, as its collectors would have read it.

:func:`simulate_history` runs the twin's scheduler over the ``days`` before ``end`` on a grid
of ``step_seconds`` and yields one :class:`HistoryChunk` per ``chunk_steps`` steps: every
node's dcgm-exporter page at every grid instant (the hpc-job-mapping labels, the GPU physics of
each job's workload profile, Xids), slurmrestd's answer at the chunk's end (the jobs pending,
running or ended in it), and the Falco and Tetragon lines of the security incident played in
it (:mod:`hpcscope.twin.history_incidents`) with the ``/proc/<pid>/cgroup`` tree Tetragon's
job lookup reads. Nothing here touches a store: the service reads the chunks with the
collector's own parsers.

Jobs come from four accounts and their users, more during the working day (queue waits when
the cluster is full), in every workload profile, with failures (user errors, Xids), time
limits reached and cancellations (pending and running). Every duration is a multiple of the
grid step and a GPU fault is seen by exactly one scrape, so that samples standing for one step
each add up to the allocation, as a scrape every few seconds would: the kept summaries of these
jobs are those a live collection would write. Everything ends ``settle_seconds`` before ``end``
(jobs still running then are cancelled): the live twin starts on an empty cluster.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcscope.model.topology import Topology
from hpcscope.twin.cluster import job_gpu_shares
from hpcscope.twin.dcgm import render_page
from hpcscope.twin.history_incidents import Incident, IncidentPlan
from hpcscope.twin.scheduler import REPAIR_SECONDS, JobState, Scheduler, SimJob, Team
from hpcscope.twin.slurmrestd import jobs_response
from hpcscope.twin.traces import TraceSpool
from hpcscope.twin.workloads import GpuCounters, GpuPhysics, Profile

#: The accounts of the history and their users (the demo logins' accounts, and two people and
#: one account without a demo login: a team lead's and an admin's pages show them).
HISTORY_TEAMS = (
    Team("vision", ("alice", "erin")),
    Team("nlp", ("bob", "frank")),
    Team("speech", ("dave",)),
    Team("robotics", ("grace",)),
)

#: The history's first job id: its ids run below the live twin's (41230 on).
FIRST_JOB_ID = 38000

#: Each user's daily evaluation job: submitted every 24 h, this many seconds before the month
#: ends (so that every day of the month, the last one included, has one of each user's jobs).
NIGHTLY_BEFORE_END = {"alice": 10800, "erin": 10800, "bob": 11400, "frank": 11400,
                      "dave": 12000, "grace": 12600}  # fmt: skip

_PROFILES = (
    Profile.HEALTHY,
    Profile.DATA_STARVED,
    Profile.STRAGGLER,
    Profile.IDLE_ALLOCATED,
    Profile.FAILED,
)
_PROFILE_WEIGHTS = (0.55, 0.14, 0.12, 0.14, 0.05)
_NAMES = {
    Profile.HEALTHY: ("llama-ft", "vit-pretrain", "whisper-train", "diffusion-xl", "moe-sweep"),
    Profile.DATA_STARVED: ("bert-finetune", "clip-laion-stream", "video-mae"),
    Profile.STRAGGLER: ("llama-7b-pretrain", "gpt-neox-20b", "t5-xxl"),
    Profile.IDLE_ALLOCATED: ("jupyter-debug", "interactive", "vscode-tunnel"),
    Profile.FAILED: ("vit-sweep", "rl-rollout", "eval-harness"),
}


@dataclass
class HistoryChunk:
    """What the collectors read over ``[start, end)`` (epoch seconds).

    Attributes:
        pages: ``(ts, node, page)``: each node's dcgm-exporter page at each grid instant.
        slurmrestd: the body of ``GET /slurm/v0.0.40/jobs`` at ``end``: the jobs pending,
            running or ended in the chunk, as slurmctld reports them.
        falco / tetragon: the lines the sensors wrote in the chunk (Falco ``json_output``,
            Tetragon export), for the chunk's incident.
        cgroups: pid -> ``/proc/<pid>/cgroup`` of the incident's processes.
        incident: the incident played, if any.
    """

    start: float
    end: float
    pages: list[tuple[float, str, str]] = field(default_factory=list)
    slurmrestd: bytes = b""
    falco: list[str] = field(default_factory=list)
    tetragon: list[str] = field(default_factory=list)
    cgroups: dict[int, str] = field(default_factory=dict)
    incident: Incident | None = None

    @property
    def incident_name(self) -> str | None:
        """The scenario played in the chunk, if any."""
        return None if self.incident is None else self.incident.scenario.name


@dataclass(frozen=True, slots=True)
class HistoryShape:
    """How busy the month is (defaults: ~25 jobs a day on 16 GPUs, ~60 % busy)."""

    jobs_per_day: float = 26.0
    max_steps: int = 30  # longest job: 30 steps (5 h at 10 min)
    captures: int = 6  # training jobs of the last week captured by the golden path
    capture_days: float = 7.0
    chunk_steps: int = 144  # one chunk: a day at 10 min
    settle_seconds: float = 2400.0
    cancel_ratio: float = 0.06
    user_error_ratio: float = 0.03
    timeout_ratio: float = 0.03


def _diurnal(hour: float, weekday: int) -> float:
    """Relative arrival rate: a working day peak around 14:00 UTC, quiet weekends."""
    day = 0.35 + 1.3 * math.exp(-(((hour - 14.0) / 4.5) ** 2))
    return day * (0.45 if weekday >= 5 else 1.0)


class _Month:
    """The scheduler over the month and what it submits, step by step."""

    def __init__(
        self,
        topology: Topology,
        work_dir: Path,
        *,
        start: float,
        step: float,
        seed: int,
        shape: HistoryShape,
        capture_dir: Path | None,
    ) -> None:
        self.topology = topology
        self.step = step
        self.shape = shape
        self.rng = np.random.default_rng([seed, 37])
        self.scheduler = Scheduler(
            topology,
            work_dir / "nodes",
            start_time=start,
            seed=seed,
            arrivals_per_hour=0.0,  # arrivals are submitted here, on the grid
            teams=HISTORY_TEAMS,
            first_job_id=FIRST_JOB_ID,
            files=False,  # the pages' labels come from the scheduler's allocations
            fault_grace_seconds=step,  # a faulted job hangs one step (the NCCL watchdog)
        )
        self.physics = {(g.node, g.index): GpuPhysics(g.model) for g in topology.gpus}
        # the golden path's capture: one window of a few training jobs of the last week
        self.traces = None if capture_dir is None else TraceSpool(capture_dir, seed=seed)
        self.captured: set[int] = set()
        self.cancels: dict[int, float] = {}
        self.touched: set[int] = set()
        self.finished: list[SimJob] = []

    def submit(self, now: float, *, last: float) -> None:
        """This step's arrivals (Poisson, at the diurnal rate), each short enough to end by
        ``last`` if it starts at once."""
        hours = (now % 86400) / 3600
        weekday = int((now // 86400 + 3) % 7)  # 1970-01-01 was a Thursday
        mean = self.shape.jobs_per_day * self.step / 86400 * _diurnal(hours, weekday) / 0.72
        room = int((last - now) // self.step) - 1
        for _ in range(int(self.rng.poisson(mean))):
            self._one(now, room)
        for team in HISTORY_TEAMS:
            for user in team.users:
                if (last - now) % 86400 == NIGHTLY_BEFORE_END[user]:
                    self._nightly(now, user, team.account)

    def _nightly(self, now: float, user: str, account: str) -> None:
        """The nightly evaluation of ``user``'s latest checkpoint: one GPU, 40 minutes."""
        job = self.scheduler.submit(
            name=f"nightly-eval-{user}",
            user=user,
            account=account,
            profile=Profile.HEALTHY,
            gpus=1,
            duration_seconds=4 * self.step,
            submit_time=now,
        )
        self.touched.add(job.job_id)

    def _one(self, now: float, room: int) -> None:
        rng, step, shape = self.rng, self.step, self.shape
        team = HISTORY_TEAMS[int(rng.integers(len(HISTORY_TEAMS)))]
        user = team.users[int(rng.integers(len(team.users)))]
        profile = _PROFILES[int(rng.choice(len(_PROFILES), p=_PROFILE_WEIGHTS))]
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.38, 0.33, 0.23, 0.06]))
        if profile is Profile.STRAGGLER:
            gpus = max(gpus, 4)
        steps = int(rng.integers(2, 8 if profile is Profile.IDLE_ALLOCATED else shape.max_steps))
        steps = min(steps, room - 2)
        if steps < 2:
            return
        limit_steps = 24 * 3600 // int(step)
        exit_code = 0
        fail_after: float | None = None
        outcome = float(rng.random())
        if profile is Profile.FAILED:  # the Xid at a scrape, the job killed at the next one
            fail_after = int(rng.integers(1, steps)) * step
            steps += 2
        elif outcome < shape.user_error_ratio:
            exit_code = 1
        elif outcome < shape.user_error_ratio + shape.timeout_ratio and steps > 3:
            limit_steps = max(2, int(steps * 0.6))
        names = _NAMES[profile]
        job = self.scheduler.submit(
            name=f"{names[int(rng.integers(len(names)))]}-{int(rng.integers(100))}",
            user=user,
            account=team.account,
            profile=profile,
            gpus=gpus,
            duration_seconds=steps * step,
            straggler_gpu=int(rng.integers(gpus)) if profile is Profile.STRAGGLER else None,
            fail_after_seconds=fail_after,
            submit_time=now,
            qos="high" if rng.random() < 0.2 else "normal",
            time_limit_minutes=int(limit_steps * step // 60),
            user_exit_code=exit_code,
        )
        self.touched.add(job.job_id)
        if float(rng.random()) < shape.cancel_ratio:  # scancel, pending or a while after
            self.cancels[job.job_id] = now + int(rng.integers(1, steps + 1)) * step

    def advance(self, now: float) -> None:
        """Cancel what is due, then let the scheduler end and start jobs at ``now``."""
        for job_id, at in list(self.cancels.items()):
            job = self.scheduler.jobs.get(job_id)
            if at > now or job is None:
                continue
            if job.start_time is not None and now - job.start_time < 2 * self.step:
                continue  # at least two scrapes of a job (a lone one weighs three steps)
            del self.cancels[job_id]
            self.scheduler.cancel(job_id, at=now)
            self.touched.add(job_id)
        for job in self.scheduler.tick(now):
            self.touched.add(job.job_id)
        # the scheduler keeps every job it ran: hand the long-finished over (its scans per
        # tick would grow with the month); a drained GPU's Xid needs its job until the reset
        for job_id, job in list(self.scheduler.jobs.items()):
            if job.end_time is not None and now - job.end_time > 2 * REPAIR_SECONDS:
                self.finished.append(self.scheduler.jobs.pop(job_id))

    def pages(self, now: float) -> list[tuple[float, str, str]]:
        """Every node's dcgm-exporter page at ``now`` (counters over the last step)."""
        scheduler, out = self.scheduler, []
        for node in self.topology.nodes:
            held = scheduler.running_on(node.name)
            counters: dict[int, GpuCounters] = {}
            for gpu in node.gpus:
                physics = self.physics[(node.name, gpu.index)]
                physics.xid_last = scheduler.xid_of(node.name, gpu.index, now)
                job = held.get(gpu.index)
                shares = (
                    None
                    if job is None
                    else job_gpu_shares(self.topology, scheduler, job, node.name, gpu.index, now)
                )
                counters[gpu.index] = physics.step(shares, dt_seconds=self.step, rng=self.rng)
            labels = {str(g): [str(job.job_id)] for g, job in held.items()}
            page = render_page(node.gpus, counters, labels, hostname=node.name)
            out.append((now, node.name, page))
        return out

    def slurmrestd(self, now: float) -> bytes:
        """slurmctld's job list at ``now``: the jobs touched since the last, and those live."""
        jobs = self.scheduler.jobs
        live = {j.job_id for j in jobs.values() if j.state in (JobState.PENDING, JobState.RUNNING)}
        shown = [jobs[i] for i in sorted(self.touched | live) if i in jobs]
        shown += [j for j in self.finished if j.job_id in self.touched]
        self.touched.clear()
        body = jobs_response(shown, cluster=self.topology.slurm_cluster_name, now=now)
        return json.dumps(body).encode()

    def capture(self, now: float, *, since: float) -> None:
        """One capture window of a running training job (two steps in, its GPUs at work), a
        few jobs of the last days: what the task prolog's capture writes into the spool."""
        if self.traces is None or now < since or len(self.captured) >= self.shape.captures:
            return
        for job in self.running():
            trained = job.profile in (Profile.STRAGGLER, Profile.DATA_STARVED, Profile.HEALTHY)
            started = job.start_time is not None and now - job.start_time >= 2 * self.step
            if trained and started and len(job.allocation) >= 2 and job.job_id not in self.captured:
                if job.profile is Profile.HEALTHY and len(self.captured) % 3:
                    continue  # mostly the stragglers and the starved: what a page explains
                self.traces.write_window(job, 0, at=now)
                self.captured.add(job.job_id)
                return

    def running(self) -> list[SimJob]:
        return [j for j in self.scheduler.jobs.values() if j.state is JobState.RUNNING]


def simulate_history(
    topology: Topology,
    work_dir: Path,
    *,
    end: float,
    days: float = 30.0,
    step_seconds: float = 600.0,
    seed: int = 42,
    shape: HistoryShape | None = None,
    capture_dir: Path | None = None,
) -> Iterator[HistoryChunk]:
    """The month before ``end`` (epoch seconds), chunk by chunk (module docstring).

    Args:
        work_dir: the scheduler's mapping files and job records of the month.
        step_seconds: the grid: one scrape of every node per step.
        capture_dir: the golden path's capture spool: a few training jobs of the last week
            each leave one capture window there (Kineto traces, meta, NCCL logs), as the task
            prolog's capture writes them; None: none.
    """
    shape = shape or HistoryShape()
    step = float(step_seconds)
    last = math.floor((end - shape.settle_seconds) / step) * step
    first = last - math.floor(days * 86400 / step) * step
    month = _Month(
        topology, work_dir, start=first, step=step, seed=seed, shape=shape, capture_dir=capture_dir
    )
    capture_from = last - shape.capture_days * 86400
    incidents = IncidentPlan(
        first=first, last=last, seed=seed, checkpoint_root=topology.checkpoint_root
    )
    chunk = HistoryChunk(first, first)
    now = first
    while now < last:
        month.submit(now, last=last)
        if now >= last - 2 * step:  # too late to start: a lone scrape weighs three steps
            for job in month.scheduler.jobs.values():
                if job.state is JobState.PENDING:
                    month.cancels[job.job_id] = now
        month.advance(now)
        month.capture(now, since=capture_from)
        chunk.pages += month.pages(now)
        if chunk.incident is None and (incident := incidents.due(now, month.running())):
            chunk.incident = incident
            chunk.falco, chunk.tetragon, chunk.cgroups = incident.lines()
        now += step
        if len(chunk.pages) >= shape.chunk_steps * len(topology.nodes) or now >= last:
            if now >= last:  # the month ends: what still runs or waits is cancelled
                for job in list(month.scheduler.jobs.values()):
                    month.scheduler.cancel(job.job_id, at=last)
                    month.touched.add(job.job_id)
            chunk.end = now
            chunk.slurmrestd = month.slurmrestd(now)
            yield chunk
            chunk = HistoryChunk(now, now)
