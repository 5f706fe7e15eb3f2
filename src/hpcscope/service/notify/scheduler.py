"""The scheduler-command seam of warn-then-cancel: ``scancel`` through one small protocol.

:class:`SlurmCommands` runs the real binary (the server's environment, or ``env`` given:
``SLURM_CONF`` for a test cluster); :class:`SlurmrestdCommands` asks slurmrestd
(``DELETE /slurm/<version>/job/<id>``, what ``scancel`` does through the REST API). Tests of the
notifier logic use a recording fake; the acceptance test runs :class:`SlurmCommands` against a
real slurmctld.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Protocol

import httpx2

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


class SlurmrestdCommands:
    """``DELETE /slurm/<version>/job/<id>`` on slurmrestd (``rest_auth/jwt``: user and token).

    Args:
        url: slurmrestd's base URL.
        version: the OpenAPI plugin (``v0.0.40``).
    """

    def __init__(
        self,
        url: str,
        *,
        version: str = "v0.0.40",
        user: str | None = None,
        token: str | None = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.version = version
        self.headers = {
            k: v for k, v in (("X-SLURM-USER-NAME", user), ("X-SLURM-USER-TOKEN", token)) if v
        }
        self.timeout_seconds = timeout_seconds

    def cancel(self, job_id: str, *, reason: str) -> str:
        if not job_id.replace("_", "").replace("+", "").isdigit():
            raise CancelFailed(f"not a Slurm job id: {job_id!r}")
        where = f"{self.url}/slurm/{self.version}/job/{job_id}"
        try:
            response = httpx2.delete(where, headers=self.headers, timeout=self.timeout_seconds)
        except httpx2.HTTPError as exc:
            raise CancelFailed(f"DELETE {where}: {exc}") from None
        try:
            errors = response.json().get("errors") or []
        except ValueError:
            errors = []
        said = "; ".join(str(e.get("error", e)) for e in errors if isinstance(e, dict))
        if response.status_code != 200 or errors:
            raise CancelFailed(f"DELETE {where}: HTTP {response.status_code} {said}".strip())
        return f"slurmrestd DELETE job {job_id} ({reason}): ok"
