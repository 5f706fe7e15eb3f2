#!/usr/bin/env python3
"""Capture real Slurm output for the parser fixtures from the test cluster (needs root).

Starts the one-node cluster of ``tests/support/slurm.py`` (Debian's Slurm 22.05, slurmdbd over
MariaDB, slurmrestd), runs a scenario that covers what the parsers must read (GPU jobs of two
teams sharing the node, a failed job, an array, a heterogeneous job, a delayed start, a held
job, a cancelled job, a CPU-only job), and writes every command's output unmodified into
``tests/fixtures/slurm/debian-22.05/`` with a ``MANIFEST.json`` (command per file, job ids).

    sudo .venv/bin/python scripts/capture_slurm_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.slurm import slurm_cluster  # noqa: E402

from hpcscope.ingest.slurm import SINFO_NODE_FIELDS, squeue_format_argument  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "slurm" / "debian-22.05"

XDMOD_FORMAT = (
    "jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
    "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,"
    "jobname"
)
HPCSCOPE_FORMAT = XDMOD_FORMAT + ",elapsedraw,timelimitraw,admincomment"


def main() -> None:
    manifest: dict[str, object] = {"files": {}}
    files: dict[str, str] = manifest["files"]  # type: ignore[assignment]
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    with (
        tempfile.TemporaryDirectory(prefix="hpcscope-capture-") as tmp,
        slurm_cluster(Path(tmp) / "cluster", accounting=True, restd=True) as cluster,
    ):
        import httpx2

        rest = httpx2.Client(
            transport=httpx2.HTTPTransport(uds=str(cluster.restd_socket)),
            base_url="http://slurmrestd",
            timeout=30,
        )

        def save(name: str, text: str, command: str) -> None:
            (OUT / name).write_text(text)
            files[name] = command

        def run(name: str, args: list[str]) -> None:
            env = {"SLURM_TIME_FORMAT": "standard"}
            done = subprocess.run(
                args, env={**cluster.env, **env}, capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0:
                raise RuntimeError(f"{args}: {done.stderr}")
            save(name, done.stdout, "TZ=UTC " + " ".join(args))

        def get(name: str, path: str) -> None:
            response = rest.get(path)
            save(name, response.text, f"slurmrestd (rest_auth/local, unix socket) GET {path}")

        jobs: dict[str, str] = {}
        jobs["alice_2gpu"] = cluster.sbatch(
            user="hpcs_alice", account="team-a", gpus=2, script="sleep 6", name="train-a"
        )
        jobs["bob_3gpu_fails"] = cluster.sbatch(
            user="hpcs_bob", account="team-b", gpus=3, script="sleep 5; exit 3", name="train-b"
        )
        jobs["bob_array"] = cluster.sbatch(
            user="hpcs_bob",
            account="team-b",
            gpus=1,
            script="sleep 5",
            name="sweep",
            extra=["--array=1-2"],
        )
        jobs["alice_delayed"] = cluster.sbatch(
            user="hpcs_alice",
            account="team-a",
            gpus=0,
            script="sleep 1",
            name="later",
            extra=["--begin=now+4"],
        )
        jobs["alice_held"] = cluster.sbatch(
            user="hpcs_alice",
            account="team-a",
            gpus=1,
            script="sleep 1",
            name="held",
            extra=["--hold"],
        )
        jobs["bob_cancelled"] = cluster.sbatch(
            user="hpcs_bob", account="team-b", gpus=0, script="sleep 120", name="long"
        )
        jobs["carol_cpu"] = cluster.sbatch(
            user="hpcs_carol", account="team-b", gpus=0, script="sleep 4", name="cpu-only"
        )
        # Slurm does not place two components of a het job on one node: on this one-node
        # cluster the het job stays PENDING (Resources), which is still a real het record.
        for key in ("alice_2gpu", "bob_3gpu_fails", "bob_cancelled", "carol_cpu"):
            cluster.wait_for_state(jobs[key], "RUNNING")
        het = cluster.run(
            [
                "sbatch",
                "--parsable",
                "--uid=hpcs_carol",
                "--gid=hpcs_carol",
                "--account=team-a",
                "--job-name=het",
                "--output=/dev/null",
                "--chdir=/tmp",
                "--mem=100",
                "-n1",
                "--gpus=1",
                ":",
                "-n1",
                "--mem=100",
                "--gpus=1",
                "--wrap=sleep 5",
            ],
        ).stdout.strip()
        jobs["carol_het"] = het.split(";")[0]
        time.sleep(1)
        # --- while jobs run
        run("squeue.json", ["squeue", "--json"])
        run("sinfo.json", ["sinfo", "--json"])
        run(
            "squeue_jobs.txt",
            [
                "squeue",
                "-a",
                "-r",
                "-h",
                "-O",
                "JobID:|,Account:|,UserName:|,Partition:|,State:|,NumNodes:|,NumCPUs:|,tres-alloc:",
            ],
        )
        run("squeue_hpcscope.txt", ["squeue", "-a", "-r", "-h", "-O", squeue_format_argument()])
        run(
            "sinfo_node_detail.txt",
            [
                "sinfo",
                "-h",
                "-N",
                "-O",
                ",".join(f"{name}: " for name in SINFO_NODE_FIELDS).rstrip(" "),
            ],
        )
        run("sinfo_partitions.txt", ["sinfo", "-h", "-o", "%P|%a|%l|%D|%N"])
        run("scontrol_show_job.txt", ["scontrol", "show", "job", "-d", "-o"])
        get("restd_v0.0.38_jobs.json", "/slurm/v0.0.38/jobs")
        get("restd_v0.0.37_jobs.json", "/slurm/v0.0.37/jobs")
        get("restd_v0.0.38_nodes.json", "/slurm/v0.0.38/nodes")
        get("restd_v0.0.38_partitions.json", "/slurm/v0.0.38/partitions")
        mapping = {p.name: p.read_text() for p in sorted(cluster.mapping_dir.iterdir())}
        save(
            "mapping_dir_while_running.json",
            json.dumps(mapping, indent=1, sort_keys=True),
            "contents of the hpc-job-mapping directory written by deploy/slurm/prolog",
        )
        cluster.run(["scancel", jobs["bob_cancelled"]])
        cluster.run(["scancel", jobs["alice_held"]])
        cluster.run(["scancel", jobs["carol_het"]])
        cluster.wait_until_idle(timeout=90)
        time.sleep(2)  # let slurmctld hand the last records to slurmdbd
        # --- finished jobs stay in slurmctld for MinJobAge: their exit codes and end times
        run("squeue_finished.json", ["squeue", "--json"])
        get("restd_v0.0.38_jobs_finished.json", "/slurm/v0.0.38/jobs")
        # --- accounting
        run("sacct.json", ["sacct", "--allusers", "--json"])
        run(
            "sacct_parsable2_xdmod.txt",
            [
                "sacct",
                "--allusers",
                "--parsable2",
                "--noheader",
                "--allocations",
                "--duplicates",
                "--format",
                XDMOD_FORMAT,
            ],
        )
        run(
            "sacct_parsable2_hpcscope.txt",
            [
                "sacct",
                "--allusers",
                "--parsable2",
                "--noheader",
                "--duplicates",
                "--format",
                HPCSCOPE_FORMAT,
            ],
        )
        get("restd_dbv0.0.38_jobs.json", "/slurmdb/v0.0.38/jobs")
        run(
            "sacctmgr_assoc.txt",
            [
                "sacctmgr",
                "--parsable2",
                "--noheader",
                "show",
                "assoc",
                "format=cluster,account,user,partition,parentname,defaultqos",
            ],
        )
        run(
            "sacctmgr_users_withcoord.txt",
            [
                "sacctmgr",
                "--parsable2",
                "show",
                "user",
                "withassoc",
                "withcoord",
                "format=user,defaultaccount,account,coordinators,adminlevel",
            ],
        )
        run(
            "sacctmgr_accounts_withcoord.txt",
            [
                "sacctmgr",
                "--parsable2",
                "show",
                "account",
                "withcoord",
                "format=account,description,organization,coordinators",
            ],
        )
        records = {p.name: p.read_text() for p in sorted(cluster.record_dir.glob("*.json"))}
        save(
            "job_records_after.json",
            json.dumps(records, indent=1, sort_keys=True),
            "job records written by deploy/slurm/prolog and epilog",
        )
        manifest["jobs"] = jobs
        manifest["slurm"] = cluster.run(["sinfo", "--version"]).stdout.strip()
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"captured {len(files)} files into {OUT}")


if __name__ == "__main__":
    main()
