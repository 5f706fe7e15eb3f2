"""The handle on a running Slurm test cluster, and the Slurm commands tests run through it.

:class:`SlurmCluster` is what :func:`tests.support.slurm.slurm_cluster` yields: the cluster's
paths (config, mapping and record directories of the shipped prolog/epilog, hook log), its
daemons, and the client commands a test needs (``sbatch`` as a test user, a field of
``scontrol show job``, waiting for a job state or for an idle node), each run with this
cluster's ``SLURM_CONF`` so that nothing reaches a Slurm installed on the machine. A failing
command or wait raises with the tails of the daemon logs (:meth:`SlurmCluster.diagnostics`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.slurm_config import NODE


@dataclass
class SlurmCluster:
    """A running test cluster. Commands run with this cluster's ``SLURM_CONF``."""

    root: Path
    conf: Path
    mapping_dir: Path
    record_dir: Path
    hook_log: Path
    accounting: bool
    slurmctld_port: int
    restd_socket: Path | None = None
    startup_seconds: dict[str, float] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    last_probe: str = ""  # stderr of the latest readiness probe (sacctmgr), for diagnostics

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env["TZ"] = "UTC"
        return env

    @property
    def node(self) -> str:
        return NODE

    def run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster; its stdout as text."""
        done = subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}\n"
                f"{self.diagnostics()}"
            )
        return done

    def sbatch(
        self,
        *,
        user: str,
        account: str,
        script: str,
        gpus: int = 0,
        name: str = "hpcs-test",
        extra: Sequence[str] = (),
    ) -> str:
        """Submit a batch job as ``user`` charged to ``account``; return its raw job id."""
        args = [
            "sbatch",
            "--parsable",
            f"--uid={user}",
            f"--gid={user}",
            f"--account={account}",
            f"--job-name={name}",
            "--output=/dev/null",
            "--chdir=/tmp",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--mem=100",
            *([f"--gpus={gpus}"] if gpus else []),
            *extra,
            f"--wrap={script}",
        ]
        out = self.run(args).stdout.strip()
        return out.split(";")[0]

    def job_field(self, job_id: str, name: str) -> str | None:
        """One field of ``scontrol show job -o`` (None once the job is gone)."""
        done = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode != 0:
            return None
        for token in done.stdout.split():
            key, _, value = token.partition("=")
            if key == name:
                return value
        return None

    def wait_for_state(self, job_id: str, *states: str, timeout: float = 60) -> str:
        """Poll until the job reaches one of ``states``; return it."""
        deadline = time.monotonic() + timeout
        state: str | None = None
        while time.monotonic() < deadline:
            state = self.job_field(job_id, "JobState")
            if state in states:
                return state
            time.sleep(0.2)
        raise TimeoutError(
            f"job {job_id} still {state} after {timeout}s (wanted {states})\n{self.diagnostics()}"
        )

    def wait_until_idle(self, timeout: float = 60) -> None:
        """Wait until no job is queued or running (and every epilog has finished)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queue = self.run(["squeue", "-h", "-o", "%i %T"], check=False).stdout.strip()
            node = self.run(["scontrol", "show", "node", "-o", NODE], check=False).stdout
            if not queue and "State=IDLE" in node and "COMPLETING" not in node:
                return
            time.sleep(0.2)
        raise TimeoutError(f"cluster not idle after {timeout}s\n{self.diagnostics()}")

    def diagnostics(self) -> str:
        """The tails of the daemon logs and the hook log, for failure messages."""
        parts = []
        names = ["slurmctld.log", "slurmd.log", "slurmdbd.log", "munged.log", "hooks.log"]
        names += sorted(p.name for p in (self.root / "log").glob("*.stdout"))
        for name in names:
            path = self.root / "log" / name
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-15:]
                parts.append(f"--- {name}\n" + "\n".join(lines))
        if self.last_probe:
            parts.append(f"--- last readiness probe (stderr)\n{self.last_probe}")
        return "\n".join(parts)
