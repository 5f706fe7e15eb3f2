"""The twin's simulated Slurm: queue, allocation, job lifecycle, prolog/epilog side effects.

Jobs from several users and accounts arrive over simulated time, wait in the queue, get GPUs
(first fit, whole jobs on one node up to a node's GPU count, larger jobs over whole nodes),
run with a workload profile, and end (completed, failed with an Xid, cancelled by time limit).
On start the scheduler does what the Slurm prolog does: it writes the job id into the
hpc-job-mapping file of each allocated GPU; on end, what the epilog does: it removes only that
job's line. Everything is deterministic under the seed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np

from hpcscope.model.topology import Topology
from hpcscope.twin import mapping
from hpcscope.twin.demo_jobs import DEMO_SCENARIO
from hpcscope.twin.workloads import Profile

log = logging.getLogger(__name__)


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    CANCELLED = "CANCELLED"


@dataclass
class SimJob:
    """One job of the simulated scheduler (times in simulated epoch seconds)."""

    job_id: int
    name: str
    user: str
    account: str
    profile: Profile
    gpus: int
    duration_seconds: float
    submit_time: float
    partition: str = "gpu"
    qos: str = "normal"
    time_limit_minutes: int = 24 * 60
    straggler_gpu: int | None = None  # index within the job's GPU list
    spread_nodes: int = 1  # >1: gpus // spread_nodes GPUs on each of that many nodes
    nodelist: tuple[str, ...] = ()  # ``sbatch --nodelist``: only these nodes (empty: any)
    fail_after_seconds: float | None = None
    xid: int | None = None
    user_exit_code: int = 0  # the program's own exit at its end: non-zero ends it FAILED
    state: JobState = JobState.PENDING
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int = 0
    allocation: list[tuple[str, int]] = field(default_factory=list)  # (node, gpu index)

    @property
    def nodes(self) -> list[str]:
        return sorted({node for node, _ in self.allocation})

    @property
    def fault_time(self) -> float | None:
        """When the job's GPU raises its Xid (simulated epoch seconds), if it ever does."""
        if self.start_time is None or self.fail_after_seconds is None:
            return None
        return self.start_time + self.fail_after_seconds

    def faulted(self, now: float) -> bool:
        fault = self.fault_time
        return fault is not None and now >= fault


@dataclass(frozen=True, slots=True)
class Team:
    account: str
    users: tuple[str, ...]


DEFAULT_TEAMS = (
    Team("vision", ("alice",)),
    Team("nlp", ("bob",)),
    Team("speech", ("dave",)),
)

_JOB_NAMES = {
    Profile.HEALTHY: ("llama-ft", "vit-pretrain", "whisper-train", "diffusion-xl", "moe-sweep"),
    Profile.DATA_STARVED: ("bert-finetune", "clip-laion-stream", "video-mae"),
    Profile.STRAGGLER: ("llama-7b-pretrain", "gpt-neox-20b", "t5-xxl"),
    Profile.IDLE_ALLOCATED: ("jupyter-debug", "interactive", "vscode-tunnel"),
    Profile.FAILED: ("vit-sweep", "rl-rollout", "eval-harness"),
}


_XIDS = (79, 48, 94, 31)

#: After a GPU fault the job hangs in NCCL until PyTorch's watchdog or Slurm ends it.
FAULT_GRACE_SECONDS = 30.0
#: A GPU that raised a fatal Xid is drained, then reset (Xid cleared) and returned to the pool.
REPAIR_SECONDS = 600.0


def user_uid(user: str) -> int:
    """A stable POSIX uid for a simulated user (job records and Lustre job ids agree on it)."""
    return 10_000 + sum(ord(c) * (i + 1) for i, c in enumerate(user)) % 50_000


class Scheduler:
    """A deterministic simulated Slurm over a topology.

    Args:
        topology: the cluster.
        mapping_root: directory holding ``<node>/hpc-job-mapping/`` for each node.
        start_time: simulated epoch seconds at which the scheduler starts.
        seed: the random seed of arrivals, profiles and noise.
        arrivals_per_hour: mean rate of new jobs after the initial scenario.
        files: write what the prolog and epilog write (mapping files, job records); off for a
            simulation that reads the allocations from memory (the twin's history).
        fault_grace_seconds: how long a job hangs after its GPU's Xid before it is ended
            (PyTorch's NCCL watchdog defaults to 10 minutes).
    """

    def __init__(
        self,
        topology: Topology,
        mapping_root: Path,
        *,
        start_time: float,
        seed: int = 42,
        arrivals_per_hour: float = 20.0,
        teams: tuple[Team, ...] = DEFAULT_TEAMS,
        first_job_id: int = 41230,
        files: bool = True,
        fault_grace_seconds: float = FAULT_GRACE_SECONDS,
    ) -> None:
        self.topology = topology
        self.mapping_root = mapping_root
        self.rng = np.random.default_rng(seed)
        # a stream of its own for what makes the SLOs move (QOS, user errors, time limits), so
        # the arrivals and profiles drawn from ``rng`` stay what they were for a seed
        self._outcomes = np.random.default_rng([seed, 14])
        self.teams = teams
        self.arrivals_per_hour = arrivals_per_hour
        self.jobs: dict[int, SimJob] = {}
        self._next_id = first_job_id
        self._free: dict[str, set[int]] = {
            n.name: {g.index for g in n.gpus} for n in topology.nodes
        }
        self._in_repair: dict[tuple[str, int], float] = {}
        self._next_arrival = start_time + self._interarrival()
        self.now = start_time
        self.files = files
        self.fault_grace_seconds = fault_grace_seconds
        self._log_level = logging.INFO if files else logging.DEBUG  # a month: no line per job
        for node in topology.nodes:
            if files:
                self.mapping_dir(node.name).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ submission

    def record_dir(self, node: str) -> Path:
        """The node's job-record directory (what the Slurm prolog writes for hpcscope)."""
        return self.mapping_root / node / "jobs"

    def _write_records(self, job: SimJob) -> None:
        """What the prolog writes on each node of the job, and the epilog completes."""
        if not self.files:
            return
        per_node: dict[str, list[int]] = {}
        for node, gpu in job.allocation:
            per_node.setdefault(node, []).append(gpu)
        for node, gpus in per_node.items():
            mapping.write_job_record(
                self.record_dir(node),
                {
                    "job_id": str(job.job_id),
                    "raw_job_id": str(job.job_id),
                    "label": str(job.job_id),
                    "cluster": self.topology.slurm_cluster_name,
                    "node": node,
                    "user": job.user,
                    "uid": user_uid(job.user),
                    "account": job.account,
                    "partition": job.partition,
                    "gpus": [str(g) for g in gpus],
                    "slurm_gpus": ",".join(str(g) for g in gpus),
                    "start_time": job.start_time,
                    "end_time": job.end_time,
                    "exit_code": job.exit_code if job.end_time is not None else None,
                },
            )

    def mapping_dir(self, node: str) -> Path:
        """The node's hpc-job-mapping directory (what dcgm-exporter is pointed at)."""
        return self.mapping_root / node / "hpc-job-mapping"

    def submit(
        self,
        *,
        name: str,
        user: str,
        account: str,
        profile: Profile,
        gpus: int,
        duration_seconds: float,
        straggler_gpu: int | None = None,
        fail_after_seconds: float | None = None,
        submit_time: float | None = None,
        qos: str = "normal",
        time_limit_minutes: int = 24 * 60,
        user_exit_code: int = 0,
        spread_nodes: int = 1,
        nodelist: tuple[str, ...] = (),
    ) -> SimJob:
        """Queue a job; it starts on the next :meth:`tick` that finds free GPUs."""
        job = SimJob(
            job_id=self._next_id,
            name=name,
            user=user,
            account=account,
            profile=profile,
            gpus=gpus,
            duration_seconds=duration_seconds,
            submit_time=self.now if submit_time is None else submit_time,
            straggler_gpu=straggler_gpu,
            fail_after_seconds=fail_after_seconds,
            qos=qos,
            time_limit_minutes=time_limit_minutes,
            user_exit_code=user_exit_code,
            spread_nodes=spread_nodes,
            nodelist=nodelist,
        )
        if profile is Profile.FAILED:
            job.xid = int(self.rng.choice(_XIDS))
            if job.fail_after_seconds is None:
                job.fail_after_seconds = float(self.rng.uniform(60, 600))
        self._next_id += 1
        self.jobs[job.job_id] = job
        return job

    def submit_demo_scenario(self) -> list[SimJob]:
        """The demo's opening jobs, one per workload profile, filling the 2 x 8 cluster.

        An 8-GPU pretraining job over both nodes (GPUs 0-3 of each, AllReduce over
        InfiniBand) whose GPU 2 of gpu02 is a thermally throttled straggler; on gpu02 GPUs 4-7
        the seeds' data-starved job (87 % reported, 19 % real); on gpu01 GPUs 4-7 a healthy
        2-GPU job, an allocated-but-idle interactive job, and a job that will fail with an Xid.
        """
        return [self.submit(**spec) for spec in DEMO_SCENARIO]

    def _interarrival(self) -> float:
        if self.arrivals_per_hour <= 0:
            return float("inf")
        return float(self.rng.exponential(3600.0 / self.arrivals_per_hour))

    def _random_job(self) -> None:
        profiles = list(Profile)
        profile = profiles[int(self.rng.choice(len(profiles), p=[0.5, 0.15, 0.1, 0.15, 0.1]))]
        team = self.teams[int(self.rng.integers(len(self.teams)))]
        user = team.users[int(self.rng.integers(len(team.users)))]
        names = _JOB_NAMES[profile]
        gpus = int(self.rng.choice([1, 2, 4, 8], p=[0.35, 0.25, 0.25, 0.15]))
        name = f"{names[int(self.rng.integers(len(names)))]}-{int(self.rng.integers(100))}"
        duration = float(self.rng.uniform(600, 3 * 3600))  # drawn in the order they always were
        # the SLOs' causes (docs/slo.md): ~10 % of the jobs that would run to their end crash
        # (user error, exit 1), ~6 % ask for too short a time limit (TIMEOUT)
        outcome = float(self._outcomes.random())
        exit_code = 1 if profile is not Profile.FAILED and outcome < 0.10 else 0
        limit = 24 * 60
        if profile is not Profile.FAILED and 0.10 <= outcome < 0.16:
            limit = max(10, int(duration * 0.7 / 60))
        self.submit(
            qos="high" if self._outcomes.random() < 0.2 else "normal",
            time_limit_minutes=limit,
            user_exit_code=exit_code,
            name=name,
            user=user,
            account=team.account,
            profile=profile,
            gpus=gpus,
            duration_seconds=duration,
            straggler_gpu=int(self.rng.integers(gpus))
            if profile is Profile.STRAGGLER and gpus > 1
            else None,
        )

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[SimJob]:
        """Advance simulated time to ``now``: end, fail and start jobs. Returns changed jobs."""
        self.now = now
        changed: list[SimJob] = []
        while self._next_arrival <= now:
            self._random_job()
            self._next_arrival += self._interarrival()
        for job in list(self.jobs.values()):
            if job.state is not JobState.RUNNING or job.start_time is None:
                continue
            fault = job.fault_time
            if fault is not None and now >= fault + self.fault_grace_seconds:
                self._end(job, JobState.FAILED, fault + self.fault_grace_seconds, exit_code=1)
                changed.append(job)
            elif now >= job.start_time + min(job.duration_seconds, job.time_limit_minutes * 60.0):
                timeout = job.duration_seconds > job.time_limit_minutes * 60.0
                failed = not timeout and job.user_exit_code != 0
                self._end(
                    job,
                    JobState.TIMEOUT
                    if timeout
                    else JobState.FAILED
                    if failed
                    else JobState.COMPLETED,
                    job.start_time + min(job.duration_seconds, job.time_limit_minutes * 60.0),
                    exit_code=job.user_exit_code if failed else 0,
                )
                changed.append(job)
        self._return_repaired(now)
        for job in sorted(self.jobs.values(), key=lambda j: (j.submit_time, j.job_id)):
            if job.state is JobState.PENDING and self._try_start(job, now):
                changed.append(job)
        return changed

    def _try_start(self, job: SimJob, now: float) -> bool:
        allocation = (
            self._spread_gpus(job.gpus, job.spread_nodes)
            if job.spread_nodes > 1
            else self._find_gpus(job.gpus, job.nodelist)
        )
        if allocation is None:
            return False
        job.allocation = allocation
        job.state = JobState.RUNNING
        job.start_time = now
        for node, gpu in allocation:
            self._free[node].discard(gpu)
            if self.files:  # the prolog
                mapping.add_job(self.mapping_dir(node), str(gpu), str(job.job_id))
        self._write_records(job)
        log.log(
            self._log_level,
            "twin: job %s (%s, %s) started on %s",
            job.job_id,
            job.user,
            job.profile,
            ",".join(f"{n}:{g}" for n, g in allocation),
        )
        return True

    def _spread_gpus(self, count: int, nodes: int) -> list[tuple[str, int]] | None:
        """``count // nodes`` GPUs (the lowest free) on each of the first ``nodes`` nodes that
        have them."""
        per = count // nodes
        fitting = [n for n in self.topology.nodes if len(self._free[n.name]) >= per]
        if len(fitting) < nodes:
            return None
        return [(n.name, g) for n in fitting[:nodes] for g in sorted(self._free[n.name])[:per]]

    def _find_gpus(
        self, count: int, nodelist: tuple[str, ...] = ()
    ) -> list[tuple[str, int]] | None:
        per_node = max(len(n.gpus) for n in self.topology.nodes)
        if count <= per_node:
            for node in self.topology.nodes:
                if nodelist and node.name not in nodelist:
                    continue
                free = sorted(self._free[node.name])
                if len(free) >= count:
                    return [(node.name, g) for g in free[:count]]
            return None
        needed = -(-count // per_node)
        whole = [n for n in self.topology.nodes if len(self._free[n.name]) == len(n.gpus)]
        if len(whole) < needed:
            return None
        allocation = [(n.name, g.index) for n in whole[:needed] for g in n.gpus]
        return allocation[:count]

    def _end(self, job: SimJob, state: JobState, end_time: float, *, exit_code: int = 0) -> None:
        job.state = state
        job.end_time = end_time
        job.exit_code = exit_code
        faulty = self.failing_gpu(job) if state is JobState.FAILED else None
        for node, gpu in job.allocation:
            if (node, gpu) == faulty:  # drained until an operator resets it
                self._in_repair[(node, gpu)] = end_time + REPAIR_SECONDS
            else:
                self._free[node].add(gpu)
            if self.files:  # the epilog
                mapping.remove_job(self.mapping_dir(node), str(gpu), str(job.job_id))
        self._write_records(job)
        log.log(self._log_level, "twin: job %s ended %s", job.job_id, state)

    def cancel(self, job_id: int, *, at: float) -> SimJob:
        """``scancel``: a pending job ends without starting, a running one ends now (the
        epilog clears its GPUs); a job already ended is left as it is."""
        job = self.jobs[job_id]
        if job.state is JobState.PENDING:
            job.state, job.end_time = JobState.CANCELLED, at
            log.log(self._log_level, "twin: job %s cancelled while pending", job.job_id)
        elif job.state is JobState.RUNNING:
            self._end(job, JobState.CANCELLED, at)
        return job

    def _return_repaired(self, now: float) -> None:
        for (node, gpu), ready in list(self._in_repair.items()):
            if now >= ready:
                del self._in_repair[(node, gpu)]
                self._free[node].add(gpu)

    def xid_of(self, node: str, gpu: int, now: float) -> int:
        """The last Xid the GPU reports: the fault's code from the fault until its reset."""
        for job in self.jobs.values():
            if self.failing_gpu(job) == (node, gpu) and job.faulted(now):
                ready = self._in_repair.get((node, gpu))
                if job.state is JobState.RUNNING or ready is not None:
                    return job.xid or 0
        return 0

    # ------------------------------------------------------------------ views

    def running_on(self, node: str) -> dict[int, SimJob]:
        """GPU index -> the running job that holds it, on ``node``."""
        held: dict[int, SimJob] = {}
        for job in self.jobs.values():
            if job.state is JobState.RUNNING:
                for job_node, gpu in job.allocation:
                    if job_node == node:
                        held[gpu] = job
        return held

    def failing_gpu(self, job: SimJob) -> tuple[str, int] | None:
        """The GPU that raises the job's Xid (its first GPU), if the job fails."""
        return job.allocation[0] if job.xid is not None and job.allocation else None

    def visible_jobs(self, *, keep_finished_seconds: float = 3600.0) -> Iterable[SimJob]:
        """Jobs slurmctld still reports: pending, running, and recently finished (MinJobAge)."""
        for job in self.jobs.values():
            if job.end_time is None or self.now - job.end_time <= keep_finished_seconds:
                yield job
