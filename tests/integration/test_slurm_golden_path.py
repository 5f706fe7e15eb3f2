"""The golden path on a real Slurm: prolog/epilog job labels, scheduler records, and
GPU -> job -> user -> account attribution.

One real cluster (munge, MariaDB + slurmdbd, slurmctld, slurmd with ``Gres=gpu:8`` over fake
devices, slurmrestd; ``tests/support/slurm.py``) runs the shipped ``deploy/slurm/prolog`` and
``epilog``. The test:

1. submits GPU jobs of different users and accounts, sharing the node (plus an array, a job that
   exits 3, a delayed start and a CPU-only job);
2. checks that the mapping files hold the right job ids on exactly the GPUs slurmctld assigned,
   while the jobs run, and are gone after;
3. serves the twin's dcgm-exporter endpoint over the same mapping directory, scrapes it with
   hpcscope's parser and converter, runs the mapping and scheduler collectors, and checks every
   sample's job, user and account (and that nothing is attributed after the epilogs);
4. ingests Slurm's records of those jobs (slurmrestd, squeue --json, sacct --parsable2 and
   --json, sacctmgr) and checks states, exit codes and both queue waits;
5. (``test_capture_names_the_delayed_rank``) runs a real 4-rank PyTorch gloo job with one rank
   delayed in its data loading, captured by the site's setting alone (TaskProlog +
   ``sitecustomize``, ``docs/capture.md``), collects its spool, and checks that the job page,
   ``GET /api/jobs/{id}`` and ``hpcscope job ID --json`` name the rank and the phase within
   60 s of the capture window closing.

Everything is torn down at the end, also on failure; the test checks that nothing is left.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import polars as pl
import pyarrow as pa
import pytest

from hpcscope.analysis.jobs.queue import queue_waits
from hpcscope.ingest.exporters.dcgm import dcgm_page_to_samples
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.ingest.slurm import parse_gres, parse_sacct_json
from hpcscope.ingest.slurm.jobmap import read_job_records, read_mapping_dir
from hpcscope.model.topology import load_topology
from hpcscope.service.collect.attribution import (
    MappingCollector,
    attributed_samples,
    store_dcgm_samples,
)
from hpcscope.service.collect.scheduler import (
    AssociationSource,
    CommandSource,
    Runner,
    SchedulerCollector,
    SlurmrestdSource,
)
from hpcscope.service.settings import bundled_topology
from hpcscope.store import Store
from hpcscope.twin.cluster import serve_routes
from hpcscope.twin.dcgm import DcgmEndpoint
from tests.support.capture_flow import check_capture_job
from tests.support.slurm import slurm_cluster
from tests.support.slurm_client import SlurmCluster
from tests.support.slurm_config import NODE
from tests.support.slurm_daemons import leftover_processes

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

RUN_SECONDS = 12  # long enough for every check while the jobs run


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    artifacts = tmp_path_factory.mktemp("slurm")
    started = time.monotonic()
    with slurm_cluster(artifacts, accounting=True, restd=True) as running:
        print(f"slurm cluster up in {running.startup_seconds}")
        yield running
    teardown_done = time.monotonic()
    assert leftover_processes(running) == [], "processes left after teardown"
    assert not running.root.exists(), "cluster directory left after teardown"
    print(f"slurm cluster lifetime {teardown_done - started:.1f}s")


def runner_for(cluster: SlurmCluster) -> Runner:
    def run(args: Sequence[str]) -> str:
        return cluster.run(list(args)).stdout

    return run


def gpus_by_job(cluster: SlurmCluster, raw_ids: Sequence[str]) -> dict[str, list[int]]:
    """The GPU indices slurmctld assigned each job (``scontrol show job -d``: GRES=...IDX)."""
    out: dict[str, list[int]] = {}
    for raw in raw_ids:
        detail = cluster.run(["scontrol", "show", "job", "-d", "-o", raw]).stdout
        # an array's id lists every task: keep the line of this raw id only
        (line,) = [ln for ln in detail.splitlines() if ln.startswith(f"JobId={raw} ")]
        indices: list[int] = []
        for token in line.split():
            if token.startswith("GRES=") and "IDX" in token:
                for entry in parse_gres(token.removeprefix("GRES=")):
                    indices.extend(entry.indices or ())
        out[raw] = sorted(indices)
    return out


def wait_for_records(cluster: SlurmCluster, raw_ids: Sequence[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    missing = set(raw_ids)
    while missing and time.monotonic() < deadline:
        missing = {raw for raw in missing if not (cluster.record_dir / f"{raw}.json").exists()}
        time.sleep(0.05)
    assert not missing, f"no prolog record for {sorted(missing)}\n{cluster.diagnostics()}"


def scrape(endpoint_url: str, parser: ExpositionParser) -> pa.Table:
    body = httpx2.get(endpoint_url, timeout=5).content
    page = parser.parse(body, source=endpoint_url)
    assert page.rejected_lines == 0
    ts = datetime.now(UTC).replace(tzinfo=None)
    return dcgm_page_to_samples(page, page.series, ts=ts, node=NODE).table


def test_golden_path_on_real_slurm(cluster: SlurmCluster, tmp_path: Path) -> None:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    # ---------------------------------------------------------------- 1. submit
    sleep = f"sleep {RUN_SECONDS}"
    jobs = {
        "alice": cluster.sbatch(user="hpcs_alice", account="team-a", gpus=2, script=sleep),
        "bob": cluster.sbatch(user="hpcs_bob", account="team-b", gpus=3, script=sleep),
        "carol_fails": cluster.sbatch(
            user="hpcs_carol", account="team-b", gpus=1, script=f"{sleep}; exit 3"
        ),
        "array": cluster.sbatch(
            user="hpcs_bob", account="team-b", gpus=1, script=sleep, extra=["--array=1-2"]
        ),
        "cpu_only": cluster.sbatch(user="hpcs_carol", account="team-a", script=sleep),
        "delayed": cluster.sbatch(
            user="hpcs_alice", account="team-a", script="sleep 1", extra=["--begin=now+3"]
        ),
    }
    for key in ("alice", "bob", "carol_fails", "cpu_only"):
        cluster.wait_for_state(jobs[key], "RUNNING", timeout=30)
    array_raw = cluster.run(
        ["squeue", "-h", "-r", "-j", jobs["array"], "-o", "%A %i"]
    ).stdout.split("\n")
    array_tasks = dict(line.split()[::-1] for line in array_raw if line.strip())  # "3_1" -> raw
    assert sorted(array_tasks) == [f"{jobs['array']}_1", f"{jobs['array']}_2"]
    for raw in array_tasks.values():
        cluster.wait_for_state(raw, "RUNNING", timeout=30)
    timings["submit_to_running"] = time.monotonic() - t0

    # ---------------------------------------------------------------- 2. mapping files
    gpu_jobs = [jobs["alice"], jobs["bob"], jobs["carol_fails"], *array_tasks.values()]
    # with PrologFlags=Alloc a job shows RUNNING while its prolog still runs; the prolog writes
    # the record last, after the mapping files: wait for the records
    wait_for_records(cluster, [*gpu_jobs, jobs["cpu_only"]])
    assigned = gpus_by_job(cluster, gpu_jobs)
    expected_labels = {str(gpu): [raw] for raw, gpus in assigned.items() for gpu in gpus}
    assert sum(len(g) for g in assigned.values()) == 2 + 3 + 1 + 1 + 1
    mapping = read_mapping_dir(cluster.mapping_dir, node=NODE)
    got_labels = {str(g): ids for (g, _), ids in mapping.jobs_by_gpu().items()}
    assert got_labels == expected_labels, cluster.diagnostics()
    records = {r.raw_job_id: r for r in read_job_records(cluster.record_dir).records}
    assert records[jobs["alice"]].user == "hpcs_alice"
    assert records[jobs["alice"]].account == "team-a"
    assert records[jobs["cpu_only"]].gpus == ()  # prolog without GPUs: record only
    assert all(records[raw].end_time is None for raw in gpu_jobs)

    # ---------------------------------------------------------------- 3. dcgm + attribution
    topology = load_topology(bundled_topology())
    gpus = topology.nodes[0].gpus
    endpoint = DcgmEndpoint(NODE, gpus, cluster.mapping_dir, shares=lambda index: None)
    server, _ = serve_routes(
        "127.0.0.1",
        0,
        {"/metrics": lambda: (200, "text/plain; version=0.0.4", endpoint.collect().encode())},
    )
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    parser = ExpositionParser()
    store = Store(tmp_path / "hpcscope.duckdb")
    try:
        assert cluster.restd_socket is not None
        scheduler = SchedulerCollector(
            store,
            SlurmrestdSource(
                url="http://slurmrestd", version="v0.0.38", unix_socket=str(cluster.restd_socket)
            ),
            associations=AssociationSource(runner=runner_for(cluster)),
        )
        mapping_collector = MappingCollector(
            store, node=NODE, mapping_dir=cluster.mapping_dir, record_dir=cluster.record_dir
        )
        assert scheduler.collect_once().ok
        mapping_collector.collect_once()
        running_samples = scrape(url, parser)
        store_dcgm_samples(store, running_samples)
        raw_to_id = {raw: task for task, raw in array_tasks.items()}
        owner = {
            jobs["alice"]: ("hpcs_alice", "team-a"),
            jobs["bob"]: ("hpcs_bob", "team-b"),
            jobs["carol_fails"]: ("hpcs_carol", "team-b"),
            **dict.fromkeys(array_tasks.values(), ("hpcs_bob", "team-b")),
        }
        expected: set[tuple[int, str | None, str | None, str | None]] = {
            (gpu, raw_to_id.get(raw, raw), *owner[raw])
            for raw, indices in assigned.items()
            for gpu in indices
        }
        idle = set(range(8)) - {gpu for indices in assigned.values() for gpu in indices}
        expected |= {(gpu, None, None, None) for gpu in idle}
        got = {
            (r["gpu"], r["job_id"], r["user"], r["account"])
            for r in attributed_samples(store).to_pylist()
        }
        assert got == expected
        timings["attribution_while_running"] = time.monotonic() - t0

        # ------------------------------------------------------------ jobs end: epilogs
        cluster.wait_until_idle(timeout=60)
        assert read_mapping_dir(cluster.mapping_dir).rows.num_rows == 0
        assert sorted(p.name for p in cluster.mapping_dir.iterdir()) == []
        ended = {r.raw_job_id: r for r in read_job_records(cluster.record_dir).records}
        assert all(ended[raw].end_time is not None for raw in gpu_jobs)
        assert ended[jobs["carol_fails"]].exit_code == 3
        mapping_collector.collect_once()
        after = datetime.now(UTC).replace(tzinfo=None)
        time.sleep(0.05)
        after_samples = scrape(url, parser)
        result = store_dcgm_samples(store, after_samples)
        assert set(result.samples.column("job_id").to_pylist()) == {None}
        late = attributed_samples(store, since=after).to_pylist()
        assert late and all(r["job_id"] is None for r in late)
        timings["after_epilog"] = time.monotonic() - t0

        # ------------------------------------------------------------ 4. scheduler records
        time.sleep(1.0)  # slurmctld hands finished jobs to slurmdbd asynchronously
        commands = SchedulerCollector(
            store,
            CommandSource(runner=runner_for(cluster)),
        )
        poll = commands.collect_once()
        assert poll.ok, poll.error
        assert scheduler.collect_once().ok  # slurmrestd's view of the finished jobs
        rows = store.query("SELECT * FROM jobs").to_pylist()
        by_id = {r["job_id"]: r for r in rows}
        ids = {
            "alice": jobs["alice"],
            "bob": jobs["bob"],
            "carol_fails": jobs["carol_fails"],
            "cpu_only": jobs["cpu_only"],
            "delayed": jobs["delayed"],
        }
        for key, job_id in ids.items():
            assert job_id in by_id, f"{key} ({job_id}) missing from jobs"
        for task in array_tasks:
            assert by_id[task]["user"] == "hpcs_bob"
            assert by_id[task]["state"] == "COMPLETED"
            assert by_id[task]["gpus"] == 1
        assert by_id[ids["alice"]]["state"] == "COMPLETED"
        assert by_id[ids["alice"]]["exit_code"] == 0
        assert by_id[ids["alice"]]["gpus"] == 2
        assert by_id[ids["bob"]]["gpus"] == 3
        assert by_id[ids["carol_fails"]]["state"] == "FAILED"
        assert by_id[ids["carol_fails"]]["exit_code"] == 3
        assert by_id[ids["cpu_only"]]["gpus"] == 0
        assert by_id[ids["alice"]]["account"] == "team-a"
        assert all(by_id[j]["end_time"] is not None for j in ids.values())
        # raw ids of array tasks resolve, and nothing is left under a raw id
        assert set(array_tasks.values()).isdisjoint(by_id)
        waits = queue_waits(
            pl.DataFrame(rows).select("job_id", "submit_time", "eligible_time", "start_time")
        )
        wait = {r["job_id"]: r for r in waits.to_dicts()}
        delayed = wait[ids["delayed"]]
        assert delayed["queue_wait_seconds"] >= 2.0  # --begin=now+3 counts as a wait...
        assert delayed["eligible_wait_seconds"] <= 2.0  # ...but not one the scheduler caused
        assert 0 <= wait[ids["alice"]]["queue_wait_seconds"] <= 10
        # allocations all closed at their job's end, none open
        open_allocs = store.query(
            "SELECT count(*) AS n FROM job_allocations WHERE end_time IS NULL"
        ).to_pylist()
        assert open_allocs == [{"n": 0}]
        assert store.coordinated_accounts("hpcs_carol") == frozenset({"team-a", "team-b"})
        members = store.query(
            'SELECT "user", account FROM account_memberships WHERE NOT coordinator ORDER BY ALL'
        ).to_pylist()
        assert {"user": "hpcs_alice", "account": "team-a"} in members
        # the same jobs through sacct --json (22.05: dbv0.0.38)
        sacct_json = parse_sacct_json(
            cluster.run(["sacct", "--allusers", "--json"]).stdout, source="sacct --json"
        )
        assert set(sacct_json.jobs.column("job_id").to_pylist()) >= set(ids.values()) | set(
            array_tasks
        )
        timings["total"] = time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()
        store.close()
    (tmp_path / "timings.json").write_text(json.dumps(timings, indent=1))
    print(f"golden path timings: {timings}; cluster start-up {cluster.startup_seconds}")


def test_capture_names_the_delayed_rank(cluster: SlurmCluster, tmp_path: Path) -> None:
    check_capture_job(cluster, tmp_path, python=sys.executable)
