"""The scheduler-command seam of warn-then-cancel: ``scancel`` through one small protocol.

:class:`SlurmCommands` runs the real binary (the server's environment, or ``env`` given:
``SLURM_CONF`` for a test cluster). Tests of the notifier logic use a recording fake; the
acceptance test runs :class:`SlurmCommands` against a real slurmctld.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Protocol

from hpcscope.model.errors import HpcscopeError


class CancelFailed(HpcscopeError):
    """``scancel`` did not cancel the job (it exited non-zero, or could not run)."""


class SchedulerCommands(Protocol):
    """What warn-then-cancel asks of the scheduler."""

    def cancel(self, job_id: str, *, reason: str) -> str:
        """Cancel ``job_id``; return what the scheduler said (for the audit log).

        Raises:
            CancelFailed: the job was not cancelled.
        """
        ...


class SlurmCommands:
    """``scancel`` on this machine."""

    def __init__(
        self,
        *,
        scancel: str = "scancel",
        env: Mapping[str, str] | None = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.scancel = scancel
        self.env = dict(env) if env is not None else None
        self.timeout_seconds = timeout_seconds

    def cancel(self, job_id: str, *, reason: str) -> str:
        if not job_id.replace("_", "").replace("+", "").isdigit():
            raise CancelFailed(f"not a Slurm job id: {job_id!r}")
        args = [self.scancel, "--verbose", job_id]
        try:
            done = subprocess.run(
                args,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.timeout_seconds,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CancelFailed(f"{self.scancel} {job_id}: {exc}") from None
        said = " ".join((done.stdout + done.stderr).split())
        if done.returncode != 0:
            raise CancelFailed(f"{self.scancel} {job_id} exited {done.returncode}: {said}")
        return f"{self.scancel} {job_id} ({reason}): {said or 'ok'}"
