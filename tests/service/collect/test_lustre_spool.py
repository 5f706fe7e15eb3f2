"""The collector over a Lustre job_stats spool directory: rows stored, failures recorded per
file, unchanged files not read again, a Lustre-only configuration that starts."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

import duckdb
import pytest

from hpcscope.model.topology import load_topology
from hpcscope.service.collect.collector import Collector, CycleReport
from hpcscope.service.collect.lustre_spool import LustreSpool
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import LustreJobStatsSection, SlurmSection
from hpcscope.service.sources import build_sources
from hpcscope.service.sources.lustre_job_stats import LustreJobStats as JobStatsSource
from hpcscope.store import Store, StoreError
from hpcscope.store.lustre import job_stats
from hpcscope.twin.lustre import LustreJobStats
from hpcscope.twin.scheduler import Scheduler
from tests.support.aio import run_async
from tests.support.collect import collector_for, context_for
from tests.support.paths import FIXTURES

LCTL = FIXTURES / "lustre" / "lctl_get_param_job_stats_lustre2.14_slurm_jobids_whamcloud.txt"
PROC = FIXTURES / "lustre" / "mdt_job_stats_lustre_exporter_fixture.yaml"

T = TypeVar("T")

BAD_LINE = "  write_bytes:     { samples: lots, unit: bytes }\n"


def _write(path: Path, text: str | bytes, *, mtime: float) -> None:
    """Write as the cron job does (temp file + rename), with a distinct mtime."""
    temp = path.with_name(f".{path.name}.tmp")
    if isinstance(text, bytes):
        temp.write_bytes(text)
    else:
        temp.write_text(text)
    os.utime(temp, (mtime, mtime))
    temp.replace(path)


def _cycle(collector: Collector) -> CycleReport:
    async def once() -> CycleReport:
        try:
            return await collector.collect_once()
        finally:
            await collector.aclose()

    report = run_async(once())
    collector.store.flush()
    return report


def _scrapes(store: Store) -> list[dict[str, object]]:
    rows = store.query(
        "SELECT target, exporter, node, ok, samples, rejected_lines, error FROM scrapes "
        "ORDER BY ts, target"
    )
    listed: list[dict[str, object]] = rows.to_pylist()
    return listed


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    directory = tmp_path / "spool"
    directory.mkdir()
    _write(directory / "oss1.job_stats", LCTL.read_text(), mtime=1_000)
    _write(directory / "mds1.job_stats", PROC.read_text(), mtime=1_000)
    # a complete entry, then a bad operation line in the second
    bad = LCTL.read_text().splitlines(keepends=True)
    _write(directory / "oss2.job_stats", "".join([*bad[:22], BAD_LINE, *bad[22:]]), mtime=1_000)
    (directory / ".oss3.job_stats.XXXXXX").write_text("half written")  # a writer's temp file
    (directory / "README").write_text("not a spool file")
    return directory


def test_spool_files_are_stored_and_a_malformed_one_is_a_failed_scrape(
    tmp_path: Path, spool: Path
) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(
            store, Settings(lustre_job_stats=LustreJobStatsSection(dir=spool))
        )
        report = _cycle(collector)
        assert (report.targets, report.ok) == (3, 2)
        # oss1 and mds1 whole; oss2's one complete entry before the bad line is kept too
        assert report.of("lustre_job_stats").rows == 240 + 240 + 15
        assert job_stats(store).num_rows == 240 + 240 + 15

        scrapes = _scrapes(store)
        by_node = {row["node"]: row for row in scrapes}
        assert set(by_node) == {"oss1", "oss2", "mds1"}
        assert by_node["oss1"] == {
            "target": str(spool / "oss1.job_stats"),
            "exporter": "lustre",
            "node": "oss1",
            "ok": True,
            "samples": 240,
            "rejected_lines": 0,
            "error": None,
        }
        failed = by_node["oss2"]
        assert failed["ok"] is False and failed["samples"] == 15
        assert failed["error"] == (
            f"{spool / 'oss2.job_stats'}:23:31: write_bytes: samples must be a number, found 'lots'"
        )
        assert report.errors == [failed["error"]]
        stored_oss2 = store.query(
            "SELECT DISTINCT job_id_raw FROM lustre_job_stats WHERE server = 'oss2'"
        ).to_pylist()
        assert stored_oss2 == [{"job_id_raw": "SLURM_JOB10:0:es18kxe-co-client"}]
        mds = store.query(
            "SELECT count(*) AS n, count(target) AS targets FROM lustre_job_stats "
            "WHERE server = 'mds1'"
        ).to_pylist()
        assert mds == [{"n": 240, "targets": 0}]  # headerless /proc copy: target unknown


def test_only_changed_files_are_read_again(tmp_path: Path, spool: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(
            store, Settings(lustre_job_stats=LustreJobStatsSection(dir=spool))
        )
        _cycle(collector)
        assert len(_scrapes(store)) == 3

        report = _cycle(collector)  # nothing changed: nothing read, nothing recorded
        assert (report.targets, report.of("lustre_job_stats").rows) == (0, 0)
        assert len(_scrapes(store)) == 3

        # the OSS writes a new snapshot in which one job moved on; the bad file is fixed
        later = LCTL.read_text().replace(
            "snapshot_time:   1723114647.887515895", "snapshot_time:   1723114707.000000001"
        )
        _write(spool / "oss1.job_stats", later, mtime=2_000)
        _write(spool / "oss2.job_stats", LCTL.read_text(), mtime=2_000)
        report = _cycle(collector)
        assert (report.targets, report.ok) == (2, 2)
        assert report.of("lustre_job_stats").rows == 15 + (240 - 15)  # oss1: job 10; oss2: the rest
        scrapes = _scrapes(store)
        assert len(scrapes) == 5
        assert [row["ok"] for row in scrapes[3:]] == [True, True]
        assert job_stats(store, job_ids=["10"]).num_rows == 2 * 30 + 15

        # the same bytes written again (a new mtime): read, recorded, nothing duplicated
        _write(spool / "oss1.job_stats", later, mtime=3_000)
        report = _cycle(collector)
        assert (report.targets, report.of("lustre_job_stats").rows) == (1, 0)
        assert job_stats(store).num_rows == 240 * 3 + 15


def test_an_unreadable_file_fails_every_cycle_without_stopping_the_others(
    tmp_path: Path, spool: Path
) -> None:
    _write(spool / "oss9.job_stats", b"job_stats:\n- job_id: \xff\xfe\n", mtime=1_000)
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(
            store, Settings(lustre_job_stats=LustreJobStatsSection(dir=spool))
        )
        first = _cycle(collector)
        assert (first.targets, first.ok) == (4, 2)
        second = _cycle(collector)
        assert (second.targets, second.ok) == (1, 0)  # retried; the others are unchanged
        assert "oss9.job_stats: cannot read" in second.errors[0]
        assert job_stats(store).num_rows == 240 + 240 + 15


def test_a_missing_spool_directory_reads_as_empty(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(
            store, Settings(lustre_job_stats=LustreJobStatsSection(dir=tmp_path / "later"))
        )
        assert _cycle(collector).targets == 0
        (tmp_path / "later").mkdir()
        shutil.copy(LCTL, tmp_path / "later" / "oss1.job_stats")
        assert _cycle(collector).of("lustre_job_stats").rows == 240


def test_a_collector_with_only_a_lustre_spool_starts(tmp_path: Path, spool: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        scrape_interval_seconds=0.2,
        slurm=SlurmSection(source="none"),
        lustre_job_stats=LustreJobStatsSection(
            dir=spool, jobid_pattern=r"SLURM_JOB(?P<job>\d+)(?::\d+:(?P<host>.+))?"
        ),
    )
    with Store(settings.store_path) as store:
        collector = collector_for(store, settings)
        (source,) = collector.sources
        assert isinstance(source, JobStatsSource) and source.spool.directory == spool
        assert source.spool.pattern.pattern == settings.lustre_job_stats.jobid_pattern
        collector.start()
        deadline = time.monotonic() + 20
        while collector.cycles < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        collector.stop()
        store.flush()
        assert collector.cycles >= 1
        # mds1's numeric ids do not match this site's pattern: kept, without a job
        assert job_stats(store, job_ids=["43"]).num_rows == 0
        assert job_stats(store, job_ids=["10"], hosts=["es18kxe-co-client"]).num_rows == 30
        nothing = context_for(store, Settings(slurm=SlurmSection(source="none")))
        assert build_sources(nothing) == []


def test_the_twins_spool_reads_cleanly_with_jobs_and_hosts(tmp_path: Path) -> None:
    """What the twin writes (twin/lustre.py) is what this reader accepts: every file ok, every
    id a Slurm job on one of its nodes."""
    topology = load_topology(bundled_topology())
    scheduler = Scheduler(topology, tmp_path / "nodes", start_time=1.7e9, arrivals_per_hour=0)
    scheduler.submit_demo_scenario()
    lustre = LustreJobStats.from_topology(topology, seed=3)
    assert lustre is not None
    spool = tmp_path / "lustre"
    with Store(tmp_path / "s.duckdb") as store:
        reader = LustreSpool(store, spool)
        stored = 0
        for tick in range(4):
            now = 1.7e9 + 30.0 * tick
            scheduler.tick(now)
            lustre.advance(now, scheduler.jobs.values())
            lustre.write(spool)
            reads = reader.collect_once()
            assert {r.server for r in reads} == {"oss1", "oss2", "mds1"}
            assert all(r.ok for r in reads), [r.error for r in reads]
            stored += sum(r.stored for r in reads)
        rows = job_stats(store)
        assert rows.num_rows == stored > 0
        jobs = {job.job_id: job for job in scheduler.jobs.values()}
        pairs = set(zip(rows["job_id"].to_pylist(), rows["host"].to_pylist(), strict=True))
        assert pairs and all(host in jobs[int(job)].nodes for job, host in pairs)
        assert set(rows["component"].to_pylist()) == {"ost", "mdt"}
        reads_again = reader.collect_once()
        assert reads_again == []  # nothing rewritten since the last read


class _WriteCountingStore(Store):
    """A real store that counts its writes and refuses the first ``refuse`` of them."""

    def __init__(self, path: Path, *, refuse: int = 0) -> None:
        super().__init__(path)
        self.writes = 0
        self.refuse = refuse

    def submit_write(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> Future[T]:
        self.writes += 1
        if self.refuse:
            self.refuse -= 1
            refused: Future[T] = Future()
            refused.set_exception(StoreError("disk full"))
            return refused
        return super().submit_write(fn)


def test_a_cycles_changed_files_are_stored_in_one_write(tmp_path: Path, spool: Path) -> None:
    # each write waits its turn on the writer thread behind the GPU rows: one per file cost
    # the 128-node twin's 16 files 15-27 s a cycle under load, holding up the GPU scrapes
    store = _WriteCountingStore(tmp_path / "s.duckdb")
    with store:
        spooled = LustreSpool(store, spool)
        reads = spooled.collect_once()
        assert store.writes == 1
        assert {r.server: (r.rows, r.stored) for r in reads} == {
            "oss1": (240, 240),
            "mds1": (240, 240),
            "oss2": (15, 15),
        }
        # a snapshot in which nothing moved stores nothing, and says so per file
        _write(spool / "oss1.job_stats", LCTL.read_text(), mtime=2_000)
        _write(spool / "mds1.job_stats", PROC.read_text(), mtime=2_000)
        again = spooled.collect_once()
        assert store.writes == 2
        assert {r.server: (r.ok, r.rows, r.stored) for r in again} == {
            "oss1": (True, 240, 0),
            "mds1": (True, 240, 0),
        }


def test_a_refused_write_fails_every_file_of_it_and_they_are_read_again(
    tmp_path: Path, spool: Path
) -> None:
    store = _WriteCountingStore(tmp_path / "s.duckdb", refuse=1)
    with store:
        spooled = LustreSpool(store, spool)
        refused = spooled.collect_once()
        assert [(r.server, r.ok, r.stored) for r in refused] == [
            ("mds1", False, 0),
            ("oss1", False, 0),
            ("oss2", False, 0),
        ]
        assert all(f"{r.path}: not stored: disk full" == r.error for r in refused)
        assert job_stats(store).num_rows == 0
        retried = spooled.collect_once()  # not marked read: the next cycle stores them
        assert [(r.server, r.stored) for r in retried] == [
            ("mds1", 240),
            ("oss1", 240),
            ("oss2", 15),
        ]
        assert job_stats(store).num_rows == 240 + 240 + 15
