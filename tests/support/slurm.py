"""A real one-node Slurm cluster for tests: munge, slurmctld, slurmd (and optionally slurmdbd
over a private MariaDB), all started by the test under a temporary directory and torn down at
the end, also when the test fails.

The node has ``Gres=gpu:8`` over fake device files, the shipped ``deploy/slurm/prolog`` and
``epilog`` (``Prolog=``, ``Epilog=``, ``PrologFlags=Alloc``), and writes every state, spool, log
and pid file under the temporary directory. Ports are picked free, so two runs on one machine do
not collide. Nothing is installed or written outside the temporary directory except the POSIX
test users (``useradd``), which are left in place (cheap, idempotent).

Needs root (slurmd runs the prolog as root, ``sbatch --uid``) and the Debian packages
``slurmctld slurmd slurm-client munge`` (+ ``slurmdbd mariadb-server`` for accounting,
``slurmrestd`` for the REST API). A missing component raises
:class:`~tests.support.slurm_daemons.SlurmUnavailable`: the test fails, it never skips.

This module is the lifecycle: checks, test users and accounts, start order, teardown. The parts
it ties together live beside it:

* :mod:`tests.support.slurm_config`: the cluster's names and users, and its config files;
* :mod:`tests.support.slurm_daemons`: starting, waiting for and stopping each daemon;
* :mod:`tests.support.slurm_client`: :class:`~tests.support.slurm_client.SlurmCluster`, the
  handle a test gets, with the Slurm commands it runs (``sbatch``, ``scontrol``, waits).

Usage::

    with slurm_cluster(tmp_path, accounting=True) as cluster:
        job = cluster.sbatch(user="hpcs_alice", account="team-a", gpus=2, script="sleep 5")
        cluster.wait_for_state(job, "RUNNING")
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.slurm_client import SlurmCluster
from tests.support.slurm_config import CLUSTER, COORDINATORS, DEPLOY, TEST_USERS, write_configs
from tests.support.slurm_daemons import (
    SlurmUnavailable,
    free_port,
    start_mariadb,
    start_munge,
    start_restd,
    start_slurm,
    start_slurmdbd,
    stop,
    which,
)

#: Programs every test cluster runs; and those it needs for accounting (slurmdbd).
_REQUIRED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
_ACCOUNTING = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct", "sacctmgr")


def ensure_test_users() -> None:
    """Create the POSIX test users (no home, no login shell) when missing."""
    for user in TEST_USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(
                ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                check=True,
                capture_output=True,
            )


def setup_associations(cluster: SlurmCluster) -> None:
    """The Slurm accounts, users and coordinators of :data:`TEST_USERS` (slurmdbd must be up)."""
    run = cluster.run
    run(["sacctmgr", "-i", "add", "cluster", CLUSTER])
    accounts = sorted({a for accts in TEST_USERS.values() for a in accts})
    run(["sacctmgr", "-i", "add", "account", *accounts, "Description=hpcscope test team"])
    for user, user_accounts in TEST_USERS.items():
        run(
            [
                "sacctmgr",
                "-i",
                "add",
                "user",
                user,
                f"Accounts={','.join(user_accounts)}",
                f"DefaultAccount={user_accounts[0]}",
            ]
        )
    for user, coordinated in COORDINATORS.items():
        run(
            [
                "sacctmgr",
                "-i",
                "add",
                "coordinator",
                f"Accounts={','.join(coordinated)}",
                f"Names={user}",
            ]
        )


@contextlib.contextmanager
def slurm_cluster(
    artifacts: Path, *, accounting: bool = True, gpus: int = 8, restd: bool = False
) -> Iterator[SlurmCluster]:
    """Start munge (+ MariaDB and slurmdbd), slurmctld and slurmd; stop them all on exit.

    The cluster lives in its own directory under ``/tmp`` (configs, sockets, state, spool,
    logs, database, mapping files, job records), world-traversable because job scripts run as
    the test users and slurmrestd reads its config after dropping root, while pytest's own
    temporary directories are private (0700). It is removed at teardown, after its logs are
    copied into ``artifacts/slurm-logs`` for a failing test to show.

    Args:
        artifacts: where the daemon logs are kept after teardown (a test's ``tmp_path``).
        accounting: run slurmdbd over a private MariaDB (for ``sacct`` and ``sacctmgr``).
        gpus: fake GPUs on the node.
        restd: also start slurmrestd on a UNIX socket (``cluster.restd_socket``).
    """
    if os.geteuid() != 0:
        raise SlurmUnavailable("the Slurm test cluster needs root (slurmd runs the prolog)")
    for name in _REQUIRED + (_ACCOUNTING if accounting else ()):
        which(name)
    if not (DEPLOY / "prolog").exists():
        raise SlurmUnavailable(f"{DEPLOY}/prolog missing")
    ensure_test_users()
    root = Path(tempfile.mkdtemp(prefix="hpcscope-slurm-"))
    root.chmod(0o755)
    ports = {"slurmctld": free_port(), "slurmd": free_port(), "slurmdbd": free_port()}
    hostname = socket.gethostname().split(".")[0]
    write_configs(root, ports=ports, accounting=accounting, gpus=gpus, hostname=hostname)
    cluster = SlurmCluster(
        root=root,
        conf=root / "slurm.conf",
        mapping_dir=root / "mapping",
        record_dir=root / "records",
        hook_log=root / "log" / "hooks.log",
        accounting=accounting,
        slurmctld_port=ports["slurmctld"],
    )
    try:
        started = time.monotonic()
        start_munge(cluster)
        cluster.startup_seconds["munge"] = time.monotonic() - started
        if accounting:
            mark = time.monotonic()
            start_mariadb(cluster)
            cluster.startup_seconds["mariadb"] = time.monotonic() - mark
            mark = time.monotonic()
            start_slurmdbd(cluster)
            setup_associations(cluster)
            cluster.startup_seconds["slurmdbd"] = time.monotonic() - mark
        mark = time.monotonic()
        start_slurm(cluster)
        cluster.startup_seconds["slurm"] = time.monotonic() - mark
        if restd:
            start_restd(cluster)
        cluster.startup_seconds["total"] = time.monotonic() - started
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(
                ["scancel", "--full", "--partition=gpu"],
                env=cluster.env,
                capture_output=True,
                timeout=10,
            )
        problems = stop(cluster)
        if problems:
            (root / "log" / "teardown.log").write_text("\n".join(problems) + "\n")
        with contextlib.suppress(OSError):
            shutil.copytree(root / "log", artifacts / "slurm-logs", dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
