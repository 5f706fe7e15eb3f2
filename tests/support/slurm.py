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
``slurmrestd`` for the REST API). A missing component raises :class:`SlurmUnavailable`: the test
fails, it never skips.

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
import signal
import socket
import stat
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy" / "slurm"
NODE = "hpcs-node01"
CLUSTER = "hpcstest"
RESTD_USER = "hpcs_carol"

#: The test users and the accounts they charge; carol coordinates both teams.
TEST_USERS: dict[str, tuple[str, ...]] = {
    "hpcs_alice": ("team-a",),
    "hpcs_bob": ("team-b",),
    "hpcs_carol": ("team-a", "team-b"),
}
COORDINATORS: dict[str, tuple[str, ...]] = {"hpcs_carol": ("team-a", "team-b")}

_REQUIRED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
_ACCOUNTING = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct", "sacctmgr")


class SlurmUnavailable(RuntimeError):
    """A Slurm component the test needs is not installed or would not start."""


def _which(name: str) -> str:
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
        names = ("slurmctld.log", "slurmd.log", "slurmdbd.log", "munged.log", "hooks.log")
        names += tuple(sorted(p.name for p in (self.root / "log").glob("*.stdout")))
        for name in names:
            path = self.root / "log" / name
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-15:]
                parts.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(parts)


# --------------------------------------------------------------------------- configuration


def _write_configs(
    root: Path, *, ports: dict[str, int], accounting: bool, gpus: int, hostname: str
) -> None:
    dev = root / "dev"
    dev.mkdir()
    for index in range(gpus):
        # character devices with the NVIDIA major (195): slurmd rejects plain files in gres.conf.
        # Nothing opens them (no driver, ConstrainDevices=no).
        os.mknod(dev / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    for sub in ("state", "spool", "log", "run", "mapping", "records"):
        (root / sub).mkdir(exist_ok=True)
    accounting_lines = (
        f"""
        AccountingStorageType=accounting_storage/slurmdbd
        AccountingStorageHost=127.0.0.1
        AccountingStoragePort={ports["slurmdbd"]}
        AccountingStoragePass={root}/run/munge.socket
        AccountingStorageTRES=gres/gpu
        AccountingStorageEnforce=associations
        JobAcctGatherType=jobacct_gather/none
        """
        if accounting
        else f"""
        AccountingStorageType=accounting_storage/none
        JobAcctGatherType=jobacct_gather/none
        JobCompType=jobcomp/filetxt
        JobCompLoc={root}/log/jobcomp.log
        """
    )
    slurm_conf = f"""
        # hpcscope test cluster: one node, 8 fake GPUs, the shipped prolog/epilog
        ClusterName={CLUSTER}
        SlurmctldHost={hostname}(127.0.0.1)
        SlurmctldPort={ports["slurmctld"]}
        SlurmdPort={ports["slurmd"]}
        SlurmUser=root
        SlurmdUser=root
        AuthType=auth/munge
        AuthInfo=socket={root}/run/munge.socket
        CryptoType=crypto/munge
        StateSaveLocation={root}/state
        SlurmdSpoolDir={root}/spool
        SlurmctldPidFile={root}/run/slurmctld.pid
        SlurmdPidFile={root}/run/slurmd.pid
        SlurmctldLogFile={root}/log/slurmctld.log
        SlurmdLogFile={root}/log/slurmd.log
        SlurmctldDebug=info
        SlurmdDebug=info
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        MpiDefault=none
        MailProg=/bin/true
        ReturnToService=2
        SchedulerType=sched/backfill
        SchedulerParameters=sched_interval=1,bf_interval=1
        SelectType=select/cons_tres
        SelectTypeParameters=CR_Core_Memory
        SlurmdParameters=config_overrides
        GresTypes=gpu
        Prolog={DEPLOY}/prolog
        Epilog={DEPLOY}/epilog
        PrologFlags=Alloc
        PrologEpilogTimeout=30
        KillWait=2
        MinJobAge=300
        InactiveLimit=0
        Waittime=0
        MessageTimeout=5
        {textwrap.dedent(accounting_lines).strip().replace(chr(10), chr(10) + " " * 8)}
        NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={hostname} CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 Gres=gpu:{gpus} State=UNKNOWN
        PartitionName=gpu Nodes={NODE} Default=YES MaxTime=60 State=UP OverSubscribe=NO
    """  # noqa: E501
    (root / "slurm.conf").write_text(textwrap.dedent(slurm_conf).lstrip())
    (root / "gres.conf").write_text(
        f"NodeName={NODE} Name=gpu File={dev}/nvidia[0-{gpus - 1}]\n"
        if gpus > 1
        else f"NodeName={NODE} Name=gpu File={dev}/nvidia0\n"
    )
    (root / "cgroup.conf").write_text(
        "# proctrack/linuxproc + task/none: the test cluster does not use cgroups\n"
        "CgroupPlugin=autodetect\nConstrainDevices=no\n"
    )
    # the prolog/epilog find their site config next to slurm.conf (see deploy/slurm/README.md)
    (root / "hpcscope.conf").write_text(
        f"mapping_dir={root}/mapping\nrecord_dir={root}/records\nlog_file={root}/log/hooks.log\n"
        "log_level=info\n"
    )
    if accounting:
        (root / "slurmdbd.conf").write_text(
            textwrap.dedent(
                f"""
                AuthType=auth/munge
                AuthInfo=socket={root}/run/munge.socket
                DbdHost=localhost
                DbdAddr=127.0.0.1
                DbdPort={ports["slurmdbd"]}
                SlurmUser=root
                PidFile={root}/run/slurmdbd.pid
                LogFile={root}/log/slurmdbd.log
                DebugLevel=info
                StorageType=accounting_storage/mysql
                StorageHost=localhost
                StorageLoc=slurm_acct_db
                StorageUser=root
                """
            ).lstrip()
        )
        (root / "slurmdbd.conf").chmod(0o600)


# --------------------------------------------------------------------------- processes


def _start(
    cluster: SlurmCluster, name: str, args: Sequence[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
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


def _wait_for(what: str, check: object, timeout: float, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.processes.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with {proc.returncode} while waiting for {what}\n"
                    f"{cluster.diagnostics()}"
                )
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise SlurmUnavailable(
        f"timed out after {timeout}s waiting for {what}\n{cluster.diagnostics()}"
    )


def _start_munge(cluster: SlurmCluster) -> None:
    key = cluster.root / "run" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = cluster.root / "run" / "munge.socket"
    _start(
        cluster,
        "munged",
        [
            _which("munged"),
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
    _wait_for("munge socket", socket_path.exists, 10, cluster)


def _start_mariadb(cluster: SlurmCluster) -> None:
    datadir = cluster.root / "mysql"
    datadir.mkdir()
    done = subprocess.run(
        [
            _which("mariadb-install-db"),
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
    _start(
        cluster,
        "mariadbd",
        [
            _which("mariadbd"),
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
    _wait_for("mariadb socket", sock.exists, 60, cluster)


def _dbd_up(cluster: SlurmCluster) -> bool:
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "cluster"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    cluster.last_probe = done.stderr.strip()  # type: ignore[attr-defined]
    return done.returncode == 0


def _setup_associations(cluster: SlurmCluster) -> None:
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


def _node_ready(cluster: SlurmCluster) -> bool:
    done = subprocess.run(
        ["scontrol", "show", "node", "-o", NODE],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return done.returncode == 0 and "State=IDLE" in done.stdout


def _stop(cluster: SlurmCluster) -> list[str]:
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
        _which(name)
    if not (DEPLOY / "prolog").exists():
        raise SlurmUnavailable(f"{DEPLOY}/prolog missing")
    ensure_test_users()
    root = Path(tempfile.mkdtemp(prefix="hpcscope-slurm-"))
    root.chmod(0o755)
    ports = {"slurmctld": _free_port(), "slurmd": _free_port(), "slurmdbd": _free_port()}
    hostname = socket.gethostname().split(".")[0]
    _write_configs(root, ports=ports, accounting=accounting, gpus=gpus, hostname=hostname)
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
        _start_munge(cluster)
        cluster.startup_seconds["munge"] = time.monotonic() - started
        if accounting:
            mark = time.monotonic()
            _start_mariadb(cluster)
            cluster.startup_seconds["mariadb"] = time.monotonic() - mark
            mark = time.monotonic()
            # libmariadb reads the socket path from MYSQL_UNIX_PORT (22.05's slurmdbd has no
            # StorageParameters for it); root connects through unix_socket authentication.
            dbd_env = dict(cluster.env, MYSQL_UNIX_PORT=f"{root}/run/mysqld.sock")
            _start(cluster, "slurmdbd", [_which("slurmdbd"), "-D"], env=dbd_env)
            _wait_for("slurmdbd", lambda: _dbd_up(cluster), 60, cluster)
            _setup_associations(cluster)
            cluster.startup_seconds["slurmdbd"] = time.monotonic() - mark
        mark = time.monotonic()
        _start(cluster, "slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(cluster.conf)])
        _start(cluster, "slurmd", [_which("slurmd"), "-D", "-N", NODE, "-f", str(cluster.conf)])
        _wait_for("node idle", lambda: _node_ready(cluster), 60, cluster)
        cluster.startup_seconds["slurm"] = time.monotonic() - mark
        if restd:
            _start_restd(cluster)
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
        problems = _stop(cluster)
        if problems:
            (root / "log" / "teardown.log").write_text("\n".join(problems) + "\n")
        with contextlib.suppress(OSError):
            shutil.copytree(root / "log", artifacts / "slurm-logs", dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)


def _start_restd(cluster: SlurmCluster) -> None:
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
    _start(
        cluster,
        "slurmrestd",
        [
            _which("slurmrestd"),
            "-a",
            "rest_auth/local",
            "-u",
            RESTD_USER,
            "-s",
            plugins,
            f"unix:{sock}",
        ],
    )
    _wait_for("slurmrestd socket", sock.exists, 15, cluster)
    cluster.restd_socket = sock
