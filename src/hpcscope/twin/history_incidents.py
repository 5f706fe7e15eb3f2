"""The security incidents of the twin's month: attacks and benign activity, in real lines.

:class:`IncidentPlan` places the scenarios of :mod:`hpcscope.twin.attacks` over the month
(several per threat vector the Falco and Tetragon sensors see, and benign activity that must
stay quiet). Each is played, when its time comes, in a job then running: Falco's
``thread.cgroups`` and the ``/proc/<pid>/cgroup`` tree name that job (and, for a scenario of two
accounts, a job of another account running then), ``hostname``/``node_name`` its node, and the
checkpoints it touches are under the cluster's checkpoint root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hpcscope.twin import attacks
from hpcscope.twin.attacks import Scenario, retarget
from hpcscope.twin.scheduler import SimJob

_DAY = 86400.0

#: (day of the month, scenario): the attacks of several vectors, and benign activity.
PLAN: tuple[tuple[float, Callable[[int], Scenario]], ...] = (
    (1.5, attacks.falco_miner),
    (3.0, attacks.benign_jit),
    (4.2, attacks.foreign_checkpoint_read),
    (6.1, attacks.uverbs_outside_jobs),
    (8.3, attacks.release_agent),
    (10.4, attacks.root_ptrace),
    (12.2, attacks.benign_checkpoints),
    (13.6, attacks.supply_chain_miner),
    (16.1, attacks.munge_key_read),
    (18.3, attacks.checkpoint_overwrite),
    (20.2, attacks.nsenter_escape),
    (22.9, attacks.nvidiascape),
    (24.5, attacks.benign_starts_and_profiling),
    (26.2, attacks.falco_miner),
    (28.4, attacks.renamed_miner_in_shm),
)

#: The scenarios' placeholder jobs: the main one, one of another account, another of the same.
_MAIN, _OTHER, _SAME = "4410001", "4410002", "4410006"


@dataclass(frozen=True, slots=True)
class Incident:
    """One scenario played at ``time`` in ``job`` on ``node`` (and ``other``: another
    account's job, ``same``: another job of the main account)."""

    scenario: Scenario
    time: float
    job: SimJob
    other: SimJob
    same: SimJob
    checkpoint_root: str = attacks.CHECKPOINTS

    @property
    def node(self) -> str:
        return self.job.nodes[0]

    def lines(self) -> tuple[list[str], list[str], dict[int, str]]:
        """(Falco lines, Tetragon lines, pid -> /proc/<pid>/cgroup) as played."""
        played = retarget(self.scenario, job_id=str(self.job.job_id), node=self.node)
        ids = {_MAIN: self.job.job_id, _OTHER: self.other.job_id, _SAME: self.same.job_id}

        def cgroup(text: str) -> str:
            for placeholder, job_id in ids.items():
                text = text.replace(f"job_{placeholder}/", f"job_{job_id}/")
            return text

        root = self.checkpoint_root.rstrip("/")

        def paths(line: str) -> str:  # the scenario's checkpoints, under the cluster's root
            return line.replace(f'"{attacks.CHECKPOINTS}/', f'"{root}/')

        return (
            [paths(line) for line in played.falco],
            [paths(line) for line in played.tetragon],
            {pid: cgroup(text) for pid, text in played.proc.cgroups.items()},
        )


class IncidentPlan:
    """The month's incidents (:data:`PLAN`), each due from its day until a job can host it.

    Args:
        first / last: the month (epoch seconds).
        seed: which running jobs host the incidents.
        checkpoint_root: the cluster's checkpoint root (the topology's).
    """

    def __init__(
        self, *, first: float, last: float, seed: int, checkpoint_root: str = attacks.CHECKPOINTS
    ) -> None:
        self._root = checkpoint_root
        span = (last - first) / _DAY
        self._pending = [(first + day / 30.0 * span * _DAY, make) for day, make in PLAN]
        self._rng = np.random.default_rng([seed, 41])

    def due(self, now: float, running: Sequence[SimJob]) -> Incident | None:
        """The next incident if its time has come and jobs can host it, else None."""
        if not self._pending or now < self._pending[0][0]:
            return None
        hosts = sorted((j for j in running if j.nodes), key=lambda j: j.job_id)
        if not hosts:
            return None
        job = hosts[int(self._rng.integers(len(hosts)))]
        others = [j for j in hosts if j.account != job.account]
        same = [j for j in hosts if j.account == job.account and j is not job]
        if not others:  # a scenario of two accounts waits for a second account
            return None
        _, make = self._pending.pop(0)
        other = others[int(self._rng.integers(len(others)))]
        scenario = make(int(now * 1e9))
        return Incident(scenario, now, job, other, same[0] if same else job, self._root)
