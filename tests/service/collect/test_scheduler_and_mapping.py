"""Scheduler collector, mapping collector and stored attribution on a real DuckDB store, fed
with real Slurm output captured from the test cluster (tests/fixtures/slurm/debian-22.05)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.ingest.slurm import SchedulerSnapshot, parse_slurmrestd_jobs
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.service.collect.attribution import (
    MappingCollector,
    attributed_samples,
    store_attributed,
)
from hpcscope.service.collect.scheduler import (
    AssociationSource,
    CommandSource,
    Runner,
    SchedulerCollector,
    SchedulerSource,
    SlurmrestdSource,
)
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store
from hpcscope.twin.cluster import serve_routes
from tests.support.paths import FIXTURES

DEB = FIXTURES / "slurm" / "debian-22.05"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.duckdb") as opened:
        yield opened


def replay(files: dict[str, str]) -> Runner:
    """A command runner that answers with captured output, by command name."""

    def run(args: Sequence[str]) -> str:
        key = args[0] if args[0] != "sacctmgr" else f"sacctmgr {args[3]}"
        return (DEB / files[key]).read_text()

    return run


class Truncated:
    name = "slurmrestd"
    url = "http://ctl/slurm/v0.0.38/jobs"

    def fetch(self) -> SchedulerSnapshot:
        raw = (DEB / "restd_v0.0.38_jobs.json").read_bytes()
        return parse_slurmrestd_jobs(raw[: len(raw) // 2], source=self.url)


def test_command_source_fills_jobs_allocations_aliases_and_accounts(store: Store) -> None:
    runner = replay(
        {
            "squeue": "squeue.json",
            "sacct": "sacct_parsable2_hpcscope.txt",
            "sacctmgr user": "sacctmgr_users_withcoord.txt",
            "sacctmgr account": "sacctmgr_accounts_withcoord.txt",
        }
    )
    collector = SchedulerCollector(
        store,
        CommandSource(runner=runner),
        associations=AssociationSource(runner=runner),
    )
    first = collector.collect_once()
    assert first.ok and first.jobs == 10
    again = collector.collect_once()
    assert again.allocations_added == 0  # a repeated poll changes nothing
    jobs = {r["job_id"]: r for r in store.query("SELECT * FROM jobs").to_pylist()}
    assert jobs["2"]["state"] == "FAILED" and jobs["2"]["exit_code"] == 3  # sacct wins on end
    assert jobs["3_1"]["user"] == "hpcs_bob"
    allocs = store.query(
        "SELECT job_id, gpu FROM job_allocations ORDER BY gpu"
    ).to_pylist()  # live GPUs from squeue --json gres_detail, ended by sacct's end times
    assert [(a["job_id"], a["gpu"]) for a in allocs] == [
        ("1", 0), ("1", 1), ("2", 2), ("2", 3), ("2", 4), ("3_1", 5), ("3_2", 6)
    ]  # fmt: skip
    assert store.query(
        "SELECT count(*) AS n FROM job_allocations WHERE end_time IS NULL"
    ).to_pylist() == [{"n": 0}]
    assert store.coordinated_accounts("hpcs_carol") == frozenset({"team-a", "team-b"})
    assert store.coordinated_accounts("hpcs_alice") == frozenset()


def test_a_failed_poll_keeps_what_was_stored(store: Store) -> None:
    good = SlurmrestdSource(url="unused")
    good.fetch = lambda: parse_slurmrestd_jobs(  # type: ignore[method-assign]
        (DEB / "restd_v0.0.38_jobs.json").read_bytes(), source="restd"
    )
    SchedulerCollector(store, good).collect_once()
    before = store.query("SELECT * FROM jobs ORDER BY job_id").to_pylist()
    result = SchedulerCollector(store, Truncated()).collect_once()
    assert not result.ok
    assert "truncated" in (result.error or "")
    assert store.query("SELECT * FROM jobs ORDER BY job_id").to_pylist() == before
    scrapes = store.query("SELECT ok, error FROM scrapes ORDER BY ts").to_pylist()
    assert [s["ok"] for s in scrapes] == [True, False]
    assert "restd_v0.0.38_jobs.json" not in (scrapes[1]["error"] or "")
    assert "http://ctl/slurm/v0.0.38/jobs:" in (scrapes[1]["error"] or "")


def test_slurmrestd_source_over_http(store: Store) -> None:
    body = (DEB / "restd_v0.0.38_jobs.json").read_bytes()
    server, _ = serve_routes(
        "127.0.0.1", 0, {"/slurm/v0.0.38/jobs": lambda: (200, "application/json", body)}
    )
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        source = SlurmrestdSource(url=url, version="v0.0.38", user="hpcscope", token="t")
        assert SchedulerCollector(store, source).collect_once().jobs == 10
        missing = SlurmrestdSource(url=url, version="v0.0.40")
        result = SchedulerCollector(store, missing).collect_once()
        assert not result.ok and "HTTP 404" in (result.error or "")
    finally:
        server.shutdown()
        server.server_close()


def test_aliases_rename_rows_stored_under_a_raw_id(store: Store) -> None:
    t0 = datetime(2026, 1, 1)
    sample: dict[str, list[object]] = {name: [None] for name in GPU_SAMPLE_SCHEMA.names}
    sample.update(ts=[t0], node=["n01"], gpu=[5], job_id=["8"])
    store.append("gpu_samples", pa.table(sample, schema=GPU_SAMPLE_SCHEMA)).result()
    alloc = pa.table(
        {"job_id": ["8"], "node": ["n01"], "gpu": [5], "gpu_instance_id": [None],
         "start_time": [t0], "end_time": [None]}
    )  # fmt: skip
    slurm_store.merge_allocations(store, alloc).result()
    aliases = pa.table({"raw_job_id": ["8"], "job_id": ["3_1"], "cluster": ["c"]})
    slurm_store.upsert_aliases(store, aliases).result()
    assert store.query("SELECT job_id FROM gpu_samples").to_pylist() == [{"job_id": "3_1"}]
    assert store.query("SELECT job_id FROM job_allocations").to_pylist() == [{"job_id": "3_1"}]
    assert slurm_store.job_id_for_labels(store, ["8", "9"]) == {"8": "3_1", "9": "9"}


def test_mapping_collector_and_attribution_end_to_end(store: Store, tmp_path: Path) -> None:
    """Mapping files + records as the real prolog wrote them, then samples: attributed to the
    right job, user and account while the job runs, to nobody after its epilog."""
    captured = json.loads((DEB / "job_records_after.json").read_text())
    mapping_dir, record_dir = tmp_path / "mapping", tmp_path / "records"
    mapping_dir.mkdir()
    record_dir.mkdir()
    for name, text in json.loads((DEB / "mapping_dir_while_running.json").read_text()).items():
        (mapping_dir / name).write_text(text)
    running = {}
    for name, text in captured.items():
        record = json.loads(text)
        record["end_time"] = record["exit_code"] = None  # as the prolog left them
        running[name] = record
        (record_dir / name).write_text(json.dumps(record))
    clock = [min(r["start_time"] for r in running.values()) + 1.0]
    collector = MappingCollector(
        store, node="hpcs-node01", mapping_dir=mapping_dir, record_dir=record_dir,
        clock=lambda: clock[0],
    )  # fmt: skip
    collector.collect_once()
    # the scheduler knows users, accounts and that raw 8 is array task 3_1
    SchedulerCollector(store, _fixed("restd_v0.0.38_jobs.json")).collect_once()
    t_run = datetime.fromtimestamp(clock[0], UTC).replace(tzinfo=None)
    store_attributed(store, _samples(t_run, gpus=range(8), labels=MAPPING_LABELS))
    got = {
        (r["gpu"], r["job_id"], r["user"], r["account"])
        for r in attributed_samples(store).to_pylist()
    }
    assert got == {
        (0, "1", "hpcs_alice", "team-a"), (1, "1", "hpcs_alice", "team-a"),
        (2, "2", "hpcs_bob", "team-b"), (3, "2", "hpcs_bob", "team-b"),
        (4, "2", "hpcs_bob", "team-b"), (5, "3_1", "hpcs_bob", "team-b"),
        (6, "3_2", "hpcs_bob", "team-b"), (7, None, None, None),
    }  # fmt: skip
    # epilogs: lines removed, records ended
    end = clock[0] + 5
    for name, record in running.items():
        record["end_time"] = end
        (record_dir / name).write_text(json.dumps(record))
    shutil.rmtree(mapping_dir)
    mapping_dir.mkdir()
    clock[0] = end + 5
    collector.collect_once()
    t_after = datetime.fromtimestamp(end + 10, UTC).replace(tzinfo=None)
    result = store_attributed(store, _samples(t_after, gpus=range(8), labels=MAPPING_LABELS))
    assert set(result.samples.column("job_id").to_pylist()) == {None}
    assert result.mismatches.num_rows == 7  # stale labels are reported, not used


MAPPING_LABELS = {0: "1", 1: "1", 2: "2", 3: "2", 4: "2", 5: "8", 6: "3"}


def _fixed(name: str) -> SchedulerSource:
    class Fixed:
        url = name

        def __init__(self) -> None:
            self.name = "slurmrestd"

        def fetch(self) -> SchedulerSnapshot:
            return parse_slurmrestd_jobs((DEB / name).read_bytes(), source=name)

    return Fixed()


def _samples(ts: datetime, *, gpus: range, labels: dict[int, str]) -> pa.Table:
    columns: dict[str, list[object]] = {name: [] for name in GPU_SAMPLE_SCHEMA.names}
    platform: list[str | None] = []
    for gpu in gpus:
        for name in GPU_SAMPLE_SCHEMA.names:
            columns[name].append(None)
        columns["ts"][-1] = ts
        columns["node"][-1] = "hpcs-node01"
        columns["gpu"][-1] = gpu
        columns["sm_active_ratio"][-1] = 0.5
        platform.append(labels.get(gpu))
    table = pa.table(columns, schema=GPU_SAMPLE_SCHEMA)
    return table.append_column("platform_job_id", pa.array(platform, pa.string()))
