"""Slurm job from a cgroup path: ``thread.cgroups`` (Falco) and ``/proc/<pid>/cgroup``.

Layouts, from Slurm's ``src/plugins/cgroup/v1/xcgroup.c`` and ``src/plugins/cgroup/v2/
cgroup_v2.c``:

- cgroup v1: ``/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n>`` in every controller;
- cgroup v2 before 26.05 (or ``CgroupJobIdPaths=yes``):
  ``/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``;
- cgroup v2 from 26.05 (default): the job directory is the job's SLUID,
  ``/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0``: ``s`` and 13
  characters of Crockford's base32 (``src/common/sluid.c``); it names the job but is not its
  numeric id, so it is kept as ``job_sluid``.

Step directories are ``step_<n>``, ``step_batch``, ``step_extern``, ``step_interactive``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from hpcscope.model.security_events import SlurmCgroup

_JOB_DIR = re.compile(r"job_(\d+)")
_SLUID_DIR = re.compile(r"[sS][0-9A-HJKMNP-TV-Z]{13}")
_STEPD_DIR = re.compile(r"(?:.+_)?slurmstepd(?:\.scope)?")
_STEP_DIR = re.compile(r"step_([A-Za-z0-9_.+-]+)")


def parse_slurm_cgroup_path(path: str) -> SlurmCgroup | None:
    """The Slurm job of one cgroup path, or None when the path is not in a job.

    Args:
        path: a cgroup path such as ``/slurm/uid_1000/job_42/step_0/task_0``.

    Returns:
        The job id (``job_<id>``) or SLUID (a SLUID directory right under the slurmstepd
        scope), and the step when a ``step_*`` directory follows.
    """
    parts = [part for part in path.split("/") if part]
    for index, part in enumerate(parts):
        job_id: str | None = None
        sluid: str | None = None
        match = _JOB_DIR.fullmatch(part)
        if match is not None:
            job_id = str(int(match.group(1)))
        elif index > 0 and _SLUID_DIR.fullmatch(part) and _STEPD_DIR.fullmatch(parts[index - 1]):
            sluid = part[0].lower() + part[1:]
        else:
            continue
        step: str | None = None
        if index + 1 < len(parts):
            step_match = _STEP_DIR.fullmatch(parts[index + 1])
            if step_match is not None:
                step = step_match.group(1)
        return SlurmCgroup(job_id=job_id, job_sluid=sluid, step=step)
    return None


@lru_cache(maxsize=4096)  # a job's processes repeat the same string
def slurm_job_from_falco_cgroups(value: str | None) -> SlurmCgroup | None:
    """The job named by Falco's ``thread.cgroups`` (``cpuset=/... memory=/...``).

    libsinsp joins ``<subsystem>=<path>`` pairs with single spaces; the first path inside a job
    wins (every controller names the same job).
    """
    if not value or value == "<NA>":
        return None
    for item in value.split(" "):
        _, sep, path = item.partition("=")
        found = parse_slurm_cgroup_path(path if sep else item)
        if found is not None:
            return found
    return None


def slurm_job_from_proc_cgroup(text: str) -> SlurmCgroup | None:
    """The job named by a ``/proc/<pid>/cgroup`` file (``id:controllers:path`` lines)."""
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        found = parse_slurm_cgroup_path(fields[2])
        if found is not None:
            return found
    return None
