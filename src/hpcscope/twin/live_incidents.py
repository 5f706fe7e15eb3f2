"""The demo twin's scripted incidents: one per threat vector, every 10 minutes, in real formats.

:class:`LiveIncidents` plays, in each cycle of :data:`CYCLE_SECONDS` from its anchor, the
incidents of :data:`SCHEDULE` at their offsets, each in a job then running and in the format
its sensor writes, into the files the demo's server reads:

1. supply chain: Falco's alert for a miner run from ``/tmp`` in a job (``falco/events.json``);
2. container escape: Tetragon's export of ``nsenter --target 1`` from a job
   (``tetragon/events.json``, the processes' ``/proc/<pid>/cgroup`` under ``proc/``);
3. GPU memory leakage: Tetragon's ``ptrace`` kprobe of a root process on a trainer;
4. RDMA blind spot: Tetragon's ``uverbs`` open by a process outside every job, and the
   InfiniBand counters node_exporter serves: constraint errors on the port of a running job's
   GPU (a P_Key probe, RD-5);
5. data poisoning and the weights: the bpftrace sensor's events (``hpcscope sensor``: Tetragon
   export under its policy) of a job of another account reading a checkpoint under the
   cluster's checkpoint root, and Lustre's job_stats of a training job writing 2 GiB to an OST
   of the datasets' pool (the topology's ``dataset_targets``, DP-4);
6. gradient injection: the integrity hook's records (``integrity/<job>/rank-<r>.jsonl``) of a
   data-parallel job one rank of which sends a poisoned gradient and reports an honest one.

All six come in the first 45 seconds of each cycle, so that Threats mode lights every
vector soon after collection starts and again every 10 minutes (an alert seen again grows its
count and keeps its state: one acknowledged or resolved stays so).

The anchor is the first time a collector reads the twin's job list (slurmrestd's ``/jobs``,
:meth:`LiveIncidents.anchor`), not the twin's start: the demo writes its month of history
before it collects (15-30 s, longer on a loaded machine), and an incident played before then
is lost to the counters' sensors (node_exporter's and Lustre's counters are read as increases
from the first reading). Only hpcscope's collector polls slurmrestd; a Prometheus scraping
the exporters from its own start (``--backend prometheus``) does not start the cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hpcscope.twin import attacks, attacks_sensor
from hpcscope.twin.attacks import Scenario, retarget
from hpcscope.twin.integrity_spool import step_lines
from hpcscope.twin.scheduler import JobState, SimJob
from hpcscope.twin.security_events import file_access, tetragon_exec

CYCLE_SECONDS = 600.0
SECOND_NS = 1_000_000_000


def _weights_read(t0: int) -> Scenario:
    """The bpftrace sensor sees a job of another account read 1 GiB of a checkpoint (W-1)."""
    s = Scenario("sensor-foreign-checkpoint-read", benign=False, job_id="4410002")
    writer = attacks._python(s, t0)
    reader = attacks._python(s, t0, job="4410002", pid=2251)
    shard = f"{attacks.CHECKPOINTS}/run-x/step-900/model.safetensors"
    s.tetragon = [
        tetragon_exec(writer),
        tetragon_exec(reader),
        file_access(writer, shard, 2, time_ns=t0 + SECOND_NS),
        *(
            attacks_sensor.sensor_read(
                reader, shard, attacks_sensor.CHUNK_BYTES, time_ns=t0 + (20 + i) * SECOND_NS
            )
            for i in range(2)
        ),
    ]
    s.expected = {"W-1": 1}
    return s


@dataclass(frozen=True, slots=True)
class Planned:
    """One incident of the cycle: its offset (simulated seconds), vector, the rule it raises
    and its scenario (None: played on the twin's counters or the integrity spool)."""

    offset: float
    vector: str
    rule: str
    make: Callable[[int], Scenario] | None


#: The cycle: every vector in the first 45 seconds, 5 s apart.
SCHEDULE: tuple[Planned, ...] = (
    Planned(5.0, "supply-chain", "SC-2", attacks.falco_miner),
    Planned(10.0, "container-escape", "CE-3", attacks.nsenter_escape),
    Planned(15.0, "gpu-memory-leakage", "GM-3", attacks.root_ptrace),
    Planned(20.0, "rdma-blind-spot", "RD-4", attacks.uverbs_outside_jobs),
    Planned(25.0, "rdma-blind-spot", "RD-5", None),  # the InfiniBand counters: a P_Key probe
    Planned(30.0, "data-poisoning", "W-1", _weights_read),
    Planned(35.0, "data-poisoning", "DP-4", None),  # Lustre job_stats: a dataset's OST written
    Planned(40.0, "gradient-injection", "GI-3", None),
)


@dataclass
class LiveIncidents:
    """Plays :data:`SCHEDULE` every :data:`CYCLE_SECONDS` from ``start`` (module docstring).

    Args:
        root: the twin's state directory: ``falco/``, ``tetragon/``, ``proc/``, ``integrity/``.
        start: the first cycle's start (simulated epoch seconds); None: nothing is played
            until :meth:`anchor` sets it.
        checkpoint_root: the cluster's checkpoint root (the topology's).
    """

    root: Path
    start: float | None
    checkpoint_root: str
    ib_errors: Callable[[str, int, str, float], bool] | None = None
    """(node, GPU, node_exporter family, count) -> whether the node's port took the errors."""
    dataset_write: Callable[[SimJob, float], bool] | None = None
    """(job, now) -> whether a dataset OST's job_stats took the job's writes (None: no pool)."""
    played: list[tuple[float, str]] = field(default_factory=list)
    _done: set[tuple[int, int]] = field(default_factory=set)
    _steps: dict[int, int] = field(default_factory=dict)

    @property
    def falco_path(self) -> Path:
        return self.root / "falco" / "events.json"

    @property
    def tetragon_path(self) -> Path:
        return self.root / "tetragon" / "events.json"

    @property
    def proc_root(self) -> Path:
        return self.root / "proc"

    @property
    def integrity_root(self) -> Path:
        return self.root / "integrity"

    def open_export(self) -> None:
        """Tetragon's export file, empty until the first incident: a running Tetragon has one
        (the demo's tails read an existing file as a collector that works, not one that fails)."""
        self.tetragon_path.parent.mkdir(parents=True, exist_ok=True)
        self.tetragon_path.touch()

    def anchor(self, at: float) -> None:
        """Start the first cycle at ``at`` (simulated epoch seconds), the first time a
        collector reads the twin; once anchored, later calls change nothing."""
        if self.start is None:
            self.start = at

    def advance(self, now: float, jobs: Iterable[SimJob]) -> list[str]:
        """Play every incident due at ``now`` that a running job can host; the vectors
        (none before the anchor)."""
        start = self.start
        if start is None or now < start:
            return []
        running = sorted(
            (
                j
                for j in jobs
                if j.state is JobState.RUNNING and j.allocation and not j.faulted(now)
            ),
            key=lambda j: j.job_id,
        )
        cycle = int((now - start) // CYCLE_SECONDS)
        played = []
        for index, planned in enumerate(SCHEDULE):
            due = start + cycle * CYCLE_SECONDS + planned.offset
            if now < due or (cycle, index) in self._done or not running:
                continue
            if self._play(planned, now, running):
                self._done.add((cycle, index))
                self.played.append((now, planned.vector))
                played.append(planned.vector)
        return played

    def _play(self, planned: Planned, now: float, running: list[SimJob]) -> bool:
        if planned.rule == "RD-5":
            return self._probe(running)
        if planned.rule == "DP-4":
            return self.dataset_write is None or self.dataset_write(running[0], now)
        if planned.make is None:
            return self._inject(now, running)
        main = running[0]
        others = [j for j in running if j.account != main.account]
        if not others:
            return False
        scenario = retarget(
            planned.make(int(now * SECOND_NS)), job_id=str(main.job_id), node=main.nodes[0]
        )
        ids = {"4410001": main.job_id, "4410002": others[0].job_id, "4410006": main.job_id}
        for pid, text in scenario.proc.cgroups.items():  # first: Tetragon's lookup reads them
            for placeholder, job_id in ids.items():
                text = text.replace(f"job_{placeholder}/", f"job_{job_id}/")
            directory = self.proc_root / str(pid)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "cgroup").write_text(text + "\n", encoding="utf-8")
        root = self.checkpoint_root.rstrip("/")
        pairs = ((self.falco_path, scenario.falco), (self.tetragon_path, scenario.tetragon))
        for path, lines in pairs:
            if lines:
                _append(path, [x.replace(f'"{attacks.CHECKPOINTS}/', f'"{root}/') for x in lines])
        return True

    def _probe(self, running: list[SimJob]) -> bool:
        """A job's process probes P_Keys: constraint errors on its GPU's rail (RD-5)."""
        if self.ib_errors is None:
            return True  # a cluster without InfiniBand: nothing to count
        node, gpu = running[0].allocation[0]
        return self.ib_errors(
            node, gpu, "node_infiniband_port_constraint_errors_received_total", 48.0
        )

    def _inject(self, now: float, running: list[SimJob]) -> bool:
        """A data-parallel job's steps, one rank sending a poisoned gradient (GI-3)."""
        jobs = [j for j in running if len(j.allocation) >= 3]
        if not jobs:
            return False
        job = max(jobs, key=lambda j: len(j.allocation))
        first = self._steps.get(job.job_id, 0)
        bad = len(job.allocation) - 2
        lines: dict[int, list[str]] = {}
        for offset in range(12):
            step = first + offset
            for rank, line in enumerate(
                step_lines(
                    job_id=str(job.job_id),
                    placement=job.allocation,
                    step=step,
                    ts=now + offset * 0.25,
                    seed=job.job_id,
                    injected={bad: 4.0} if offset >= 8 else None,
                )
            ):
                lines.setdefault(rank, []).append(line)
        self._steps[job.job_id] = first + 12
        for rank, rank_lines in lines.items():
            _append(self.integrity_root / str(job.job_id) / f"rank-{rank}.jsonl", rank_lines)
        return True


def _append(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))
