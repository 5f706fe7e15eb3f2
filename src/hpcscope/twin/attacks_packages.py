"""Twin scenarios for SC-5: Python distributions installed into a ``site-packages`` in a job.

The lines are the Tetragon ``security_file_permission`` writes (mask 2) that an installer's
files make (``python -m pip install``: a ``<name>-<version>.dist-info/`` and, for some
packages, a ``.pth``), with the ``/proc/<pid>/cgroup`` of the processes; the ground truth is in
each :class:`~hpcscope.twin.attacks.Scenario`. Replayed by ``bench/detection_quality.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from hpcscope.twin.attacks import CHECKPOINTS, NODE, SECOND_NS, Scenario, _python
from hpcscope.twin.security_events import Proc, file_access, tetragon_exec

SITE = "/home/alice/venvs/train/lib/python3.11/site-packages"
DIST_FILES = ("INSTALLER", "METADATA", "RECORD", "WHEEL", "top_level.txt")


def _pip(s: Scenario, t0: int, pid: int) -> Proc:
    """``python -m pip install`` run by the job's training script (proc.name is python3)."""
    python = _python(s, t0)
    return s.proc.add(
        Proc(NODE, pid, 1000, "/usr/bin/python3", "-m pip install -q x", t0 + SECOND_NS, python),
        "4410001",
    )


def _dist(proc: Proc, dist_info: str, t_ns: int) -> list[str]:
    return [
        file_access(proc, f"{SITE}/{dist_info}/{name}", 2, time_ns=t_ns + k * SECOND_NS)
        for k, name in enumerate(DIST_FILES)
    ]


def pip_install_unlocked(t0: int) -> Scenario:
    """``python -m pip install`` of a release on the known-bad list (ultralytics 8.3.41) that
    also drops a ``.pth`` (run at every interpreter start): SC-5 HIGH twice (the
    distribution, the ``.pth``)."""
    s = Scenario("pip-install-unlocked-in-job", benign=False)
    pip = _pip(s, t0, 2301)
    s.tetragon = [
        tetragon_exec(pip),
        *_dist(pip, "ultralytics-8.3.41.dist-info", t0 + 2 * SECOND_NS),
        file_access(pip, f"{SITE}/ultralytics_hook.pth", 2, time_ns=t0 + 8 * SECOND_NS),
        file_access(pip, f"{SITE}/ultralytics/__init__.py", 2, time_ns=t0 + 9 * SECOND_NS),
    ]
    s.expected = {"SC-5": 2}
    s.severities = {"SC-5": "HIGH"}
    return s


def pip_install_locked(t0: int) -> Scenario:
    """A job installs a distribution its lockfile names (``einops==0.8.0``) at run time:
    still an install during a job, SC-5 at MEDIUM only."""
    s = Scenario("pip-install-locked-in-job", benign=False)
    pip = _pip(s, t0, 2311)
    s.tetragon = [tetragon_exec(pip), *_dist(pip, "einops-0.8.0.dist-info", t0 + 2 * SECOND_NS)]
    s.expected = {"SC-5": 1}
    s.severities = {"SC-5": "MEDIUM"}
    return s


def benign_site_packages_use(t0: int) -> Scenario:
    """A job imports from its venv (bytecode caches written under ``site-packages``), writes a
    ``.pth`` checkpoint under its checkpoint root and a package's data file: no SC-5."""
    s = Scenario("benign-site-packages-use", benign=True)
    python = _python(s, t0)
    s.tetragon = [
        tetragon_exec(python),
        file_access(python, f"{SITE}/torch/__pycache__/functional.cpython-311.pyc", 2,
                    time_ns=t0 + SECOND_NS),
        file_access(python, f"{SITE}/triton/_C/cache/kernel.pth", 2, time_ns=t0 + 2 * SECOND_NS),
        file_access(python, f"{CHECKPOINTS}/run-p/step-5/model.pth", 2,
                    time_ns=t0 + 3 * SECOND_NS),
        file_access(python, f"{SITE}/einops-0.8.0.dist-info/RECORD", 4,
                    time_ns=t0 + 4 * SECOND_NS),
    ]  # fmt: skip
    return s


PACKAGE_SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    pip_install_unlocked,
    pip_install_locked,
    benign_site_packages_use,
)


def package_scenarios(t0: int) -> list[Scenario]:
    """Every scenario of this module, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in PACKAGE_SCENARIOS]
