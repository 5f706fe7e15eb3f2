"""What the one-node Slurm test cluster is, and the config files that say so.

The names every part of the test cluster agrees on (cluster, node, the shipped hooks' directory,
the POSIX test users, the accounts they charge and who coordinates them) and the rendering of
``slurm.conf``, ``gres.conf``, ``cgroup.conf``, ``slurmdbd.conf`` and the prolog/epilog's
``hpcscope.conf`` into the cluster's directory. Kept apart from starting daemons
(:mod:`tests.support.slurm_daemons`) so that a config line can be read, and changed, without
the process handling around it; :func:`tests.support.slurm.slurm_cluster` ties them together.
"""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

from tests.support.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy" / "slurm"
NODE = "hpcs-node01"
CLUSTER = "hpcstest"
#: The test user slurmrestd runs as once it drops root (it binds its socket as this user).
RESTD_USER = "hpcs_carol"

#: The test users and the accounts they charge; carol coordinates both teams.
TEST_USERS: dict[str, tuple[str, ...]] = {
    "hpcs_alice": ("team-a",),
    "hpcs_bob": ("team-b",),
    "hpcs_carol": ("team-a", "team-b"),
}
COORDINATORS: dict[str, tuple[str, ...]] = {"hpcs_carol": ("team-a", "team-b")}

#: The site's capture setting in the test cluster: first window after 4 optimizer steps,
#: 1 step waited, 1 warm-up step, 6 recorded.
CAPTURE_FIRST_STEP = 4
CAPTURE_SCHEDULE = "1,1,6"


def write_configs(
    root: Path, *, ports: dict[str, int], accounting: bool, gpus: int, hostname: str
) -> None:
    """Write the config files of a cluster living in ``root``, and its fake GPU devices.

    Args:
        root: the cluster's directory; ``state``, ``spool``, ``log``, ``run``, ``mapping``
            ``records`` and ``capture`` (the trace-capture spool) are created under it,
            and ``job-output`` (world-writable, sticky) for jobs' output files.
        ports: the TCP ports of ``slurmctld``, ``slurmd`` and ``slurmdbd``.
        accounting: write the slurmdbd accounting lines and ``slurmdbd.conf`` (otherwise
            jobs are recorded to a ``jobcomp/filetxt`` log).
        gpus: fake GPUs on the node (character devices under ``root/dev``).
        hostname: this machine's short host name (``SlurmctldHost``, ``NodeHostname``).
    """
    dev = root / "dev"
    dev.mkdir()
    for index in range(gpus):
        # character devices with the NVIDIA major (195): slurmd rejects plain files in gres.conf.
        # Nothing opens them (no driver, ConstrainDevices=no).
        os.mknod(dev / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    for sub in ("state", "spool", "log", "run", "mapping", "records", "capture"):
        (root / sub).mkdir(exist_ok=True)
    (root / "job-output").mkdir(mode=0o1777)  # jobs' stdout/stderr, written as the test users
    (root / "job-output").chmod(0o1777)
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
        TaskProlog={DEPLOY}/task-prolog
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
        # the golden path's trace capture (docs/capture.md): short windows for a test job
        f"capture_dir={root}/capture\ncapture_first_step={CAPTURE_FIRST_STEP}\n"
        f"capture_schedule={CAPTURE_SCHEDULE}\ncapture_every_seconds=3600\n"
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
