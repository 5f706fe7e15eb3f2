"""The daemons of the Slurm test cluster: starting them, waiting for them, stopping them all.

munged, MariaDB, slurmdbd, slurmctld with slurmd, and slurmrestd, each started in the
foreground in its own session, its output in ``log/<name>.stdout`` of the cluster's directory
and its process kept in :attr:`SlurmCluster.processes <tests.support.slurm_client.SlurmCluster>`
in start order. Every ``start_*`` returns once its daemon answers (a socket exists, ``sacctmgr``
replies, the node is idle); a daemon that exits or never answers raises
:class:`SlurmUnavailable` with the log tails, so the test fails rather than hangs or skips.
:func:`stop` ends them in reverse order, then the job processes slurmd leaves behind by
design. :func:`tests.support.slurm.slurm_cluster` decides which of them a test gets.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.slurm_client import SlurmCluster
from tests.support.slurm_config import NODE, RESTD_USER


class SlurmUnavailable(RuntimeError):
    """A Slurm component the test needs is not installed or would not start."""


def which(name: str) -> str:
    """The path of a Slurm, munge or MariaDB program (``sbin`` first: root's daemons live there)."""
    for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SlurmUnavailable(
            f"{name} not found: install the Debian packages with scripts/install-system-deps.sh"
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, so that two clusters on one machine differ."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(
    cluster: SlurmCluster, name: str, args: Sequence[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start daemon ``name`` in its own session, its output in ``log/<name>.stdout``."""
    log = open(cluster.root / "log" / f"{name}.stdout", "wb")  # noqa: SIM115 (lives with proc)
    proc = subprocess.Popen(
        list(args),
        env=env if env is not None else cluster.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    cluster.processes[name] = proc
    return proc


def wait_for(what: str, check: Callable[[], bool], timeout: float, cluster: SlurmCluster) -> None:
    """Poll ``check`` until it is true; fail at once when one of our daemons has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.processes.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with {proc.returncode} while waiting for {what}\n"
                    f"{cluster.diagnostics()}"
                )
        if check():
            return
        time.sleep(0.1)
    raise SlurmUnavailable(
        f"timed out after {timeout}s waiting for {what}\n{cluster.diagnostics()}"
    )


def start_munge(cluster: SlurmCluster) -> None:
    """munged with a fresh key on the cluster's own socket (the machine's munge is untouched)."""
    key = cluster.root / "run" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = cluster.root / "run" / "munge.socket"
    start(
        cluster,
        "munged",
        [
            which("munged"),
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={socket_path}",
            f"--pid-file={cluster.root}/run/munged.pid",
            f"--log-file={cluster.root}/log/munged.log",
            f"--seed-file={cluster.root}/run/munged.seed",
            "--num-threads=2",
        ],
    )
    wait_for("munge socket", socket_path.exists, 10, cluster)


def start_mariadb(cluster: SlurmCluster) -> None:
    """A private MariaDB for slurmdbd: a fresh data directory, a UNIX socket, no network."""
    datadir = cluster.root / "mysql"
    datadir.mkdir()
    done = subprocess.run(
        [
            which("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={datadir}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise SlurmUnavailable(f"mariadb-install-db failed: {done.stderr[-2000:]}")
    sock = cluster.root / "run" / "mysqld.sock"
    start(
        cluster,
        "mariadbd",
        [
            which("mariadbd"),
            "--no-defaults",
            f"--datadir={datadir}",
            f"--socket={sock}",
            f"--pid-file={cluster.root}/run/mysqld.pid",
            f"--log-error={cluster.root}/log/mariadb.log",
            "--skip-networking",
            "--user=root",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
            "--innodb-flush-log-at-trx-commit=0",
            "--skip-log-bin",
            "--performance-schema=OFF",
        ],
    )
    wait_for("mariadb socket", sock.exists, 60, cluster)


def _dbd_up(cluster: SlurmCluster) -> bool:
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "cluster"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    cluster.last_probe = done.stderr.strip()
    return done.returncode == 0


def start_slurmdbd(cluster: SlurmCluster) -> None:
    """slurmdbd over the cluster's MariaDB; returns once ``sacctmgr`` gets an answer."""
    # libmariadb reads the socket path from MYSQL_UNIX_PORT (22.05's slurmdbd has no
    # StorageParameters for it); root connects through unix_socket authentication.
    dbd_env = dict(cluster.env, MYSQL_UNIX_PORT=f"{cluster.root}/run/mysqld.sock")
    start(cluster, "slurmdbd", [which("slurmdbd"), "-D"], env=dbd_env)
    wait_for("slurmdbd", lambda: _dbd_up(cluster), 60, cluster)


def _node_ready(cluster: SlurmCluster) -> bool:
    done = subprocess.run(
        ["scontrol", "show", "node", "-o", NODE],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return done.returncode == 0 and "State=IDLE" in done.stdout


def start_slurm(cluster: SlurmCluster) -> None:
    """slurmctld and slurmd; returns once slurmctld reports the node IDLE (registered, free)."""
    start(cluster, "slurmctld", [which("slurmctld"), "-D", "-i", "-f", str(cluster.conf)])
    start(cluster, "slurmd", [which("slurmd"), "-D", "-N", NODE, "-f", str(cluster.conf)])
    wait_for("node idle", lambda: _node_ready(cluster), 60, cluster)


def start_restd(cluster: SlurmCluster) -> None:
    """slurmrestd on a UNIX socket with ``rest_auth/local`` (peer credentials: no JWT keys)."""
    # slurmrestd binds its socket after dropping root, as RESTD_USER
    sock_dir = cluster.root / "restd"
    sock_dir.mkdir()
    entry = pwd.getpwnam(RESTD_USER)
    os.chown(sock_dir, entry.pw_uid, entry.pw_gid)  # slurmrestd binds after dropping root
    sock = sock_dir / "slurmrestd.socket"
    plugins = "openapi/v0.0.38,openapi/v0.0.37"
    if cluster.accounting:
        plugins += ",openapi/dbv0.0.38,openapi/dbv0.0.37"
    start(
        cluster,
        "slurmrestd",
        [
            which("slurmrestd"),
            "-a",
            "rest_auth/local",
            "-u",
            RESTD_USER,
            "-s",
            plugins,
            f"unix:{sock}",
        ],
    )
    wait_for("slurmrestd socket", sock.exists, 15, cluster)
    cluster.restd_socket = sock


def stop(cluster: SlurmCluster) -> list[str]:
    """Stop our daemons (reverse start order), then any process still using our SLURM_CONF."""
    problems: list[str] = []
    for name in reversed(list(cluster.processes)):
        proc = cluster.processes[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
                problems.append(f"{name} needed SIGKILL")
    # slurmstepd and job processes are children of slurmd that outlive it by design: find the
    # ones started for this cluster (their environment names our SLURM_CONF) and end them.
    marker = f"SLURM_CONF={cluster.conf}".encode()
    for pid in _pids_with_environ(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            problems.append(f"left-over process {pid} killed")
    return problems


def _pids_with_environ(marker: bytes) -> list[int]:
    pids = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def leftover_processes(cluster: SlurmCluster) -> list[int]:
    """Processes of this cluster still alive (none after teardown)."""
    pids = [p.pid for p in cluster.processes.values() if p.poll() is None]
    return pids + _pids_with_environ(f"SLURM_CONF={cluster.conf}".encode())
