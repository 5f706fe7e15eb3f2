"""The twin's Lustre job_stats files: the real 2.14 layout, cumulative counters, cleanup, and a
data-starved job whose slow reads show on the storage side."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.cluster import TwinCluster
from hpcscope.twin.lustre import (
    JOB_CLEANUP_INTERVAL_SECONDS,
    MDT_OPERATIONS,
    OST_OPERATIONS,
    JobStatsEntry,
    LustreJobStats,
    LustreTarget,
    OpCounter,
    server_layout,
)
from hpcscope.twin.scheduler import Scheduler
from hpcscope.twin.workloads import Profile

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lustre"
OST_SAMPLE = FIXTURES / "lctl_get_param_job_stats_lustre2.14_slurm_jobids_whamcloud.txt"
MDT_SAMPLE = FIXTURES / "mdt_job_stats_entry_lustre2.14_whamcloud.txt"
TOPOLOGY = load_topology(bundled_topology())
T0 = 1.7e9

# --------------------------------------------------------------------------- a reader for tests

HEADER = re.compile(r"^(obdfilter|mdt)\.([\w-]+)\.job_stats=$")
JOB_ID = re.compile(r'^- job_id:          (?:"(.*)"|([\w.-]+))$')
TIME = re.compile(r"^  (snapshot_time|start_time|elapsed_time):\s+(\d+)\.(\d{9}) secs\.nsecs$")
OP = re.compile(
    r"^  (\w+):\s+\{ samples:\s+(\d+), unit:\s+(bytes|usecs|reqs), min:\s+(\d+), max:\s+(\d+), "
    r"sum:\s+(\d+), sumsq:\s+(\d+)(?:, hist: \{ (.*) \})? \}$"
)
_UNITS = {"K": 10, "M": 20, "G": 30}


@dataclass
class Entry:
    target: str
    job_id: str
    times_ns: dict[str, int] = field(default_factory=dict)
    ops: dict[str, tuple[int, str, int, int, int, int, dict[int, int] | None]] = field(
        default_factory=dict
    )


def _bucket(label: str) -> int:
    return int(label[:-1]) << _UNITS[label[-1]] if label[-1] in _UNITS else int(label)


def read_job_stats(text: str, *, target: str = "") -> list[Entry]:
    """Every entry of an ``lctl get_param`` job_stats text; fails on a line of no known shape."""
    entries: list[Entry] = []
    for number, line in enumerate(text.splitlines(), 1):
        if header := HEADER.match(line):
            target = header[2]
        elif line == "job_stats:":
            continue
        elif job := JOB_ID.match(line):
            entries.append(Entry(target, job[1] if job[1] is not None else job[2]))
        elif time := TIME.match(line):
            entries[-1].times_ns[time[1]] = int(time[2]) * 10**9 + int(time[3])
        elif op := OP.match(line):
            hist = None
            if op[8] is not None:
                parts = [p.split(": ") for p in op[8].split(", ") if p.strip()]
                hist = {_bucket(k): int(v) for k, v in parts}
            samples, low, high, total, squares = (int(op[i]) for i in (2, 4, 5, 6, 7))
            entries[-1].ops[op[1]] = (samples, op[3], low, high, total, squares, hist)
        else:
            raise AssertionError(f"line {number} has no job_stats shape: {line!r}")
    return entries


def _entry_of(parsed: Entry, target: LustreTarget) -> JobStatsEntry:
    ops = {}
    for name, (samples, _unit, low, high, total, squares, hist) in parsed.ops.items():
        ops[name] = OpCounter(samples, low, high, total, squares, dict(hist or {}))
    times = parsed.times_ns
    return JobStatsEntry(parsed.job_id, target, times["start_time"], times["snapshot_time"], ops)


# --------------------------------------------------------------------------- the real layout


def test_the_renderer_reproduces_the_real_ost_sample_byte_for_byte() -> None:
    text = OST_SAMPLE.read_text()
    parsed = read_job_stats(text)
    assert len(parsed) == 16 and {e.target for e in parsed} == {"es01a-OST0001"}
    target = LustreTarget("oss1", "es01a-OST0001", "ost")
    stats = LustreJobStats([target, LustreTarget("mds1", "es01a-MDT0000", "mdt")])
    for entry in parsed:
        assert tuple(entry.ops) == OST_OPERATIONS
        stats._entries[(target.name, entry.job_id)] = _entry_of(entry, target)
    assert stats.render("oss1") == text


def test_the_renderer_reproduces_a_real_mdt_entry_byte_for_byte() -> None:
    text = MDT_SAMPLE.read_text()
    [parsed] = read_job_stats(text)
    assert tuple(parsed.ops) == MDT_OPERATIONS
    entry = _entry_of(parsed, LustreTarget("mds1", "es01a-MDT0000", "mdt"))
    assert entry.render() == text


def test_server_layout_names_targets_as_lustre_does() -> None:
    targets = server_layout("scratch", object_targets=10, metadata_targets=1)
    assert [t.name for t in targets][-3:] == [
        "scratch-OST0008",
        "scratch-OST0009",
        "scratch-MDT0000",
    ]
    assert targets[9].name == "scratch-OST0009" and targets[9].server == "oss3"
    assert targets[0].parameter == "obdfilter.scratch-OST0000.job_stats"
    assert targets[-1].parameter == "mdt.scratch-MDT0000.job_stats"
    assert server_layout("fs", object_targets=11)[10].name == "fs-OST000a"


# --------------------------------------------------------------------------- the simulation


def _run(
    root: Path, seconds: float, *, step: float = 10.0, seed: int = 3, demo: bool = True
) -> tuple[Scheduler, LustreJobStats, list[dict[str, list[Entry]]]]:
    """The demo scenario on the bundled 2 x 8 topology, ticked every ``step`` seconds; each
    tick's files read back per server."""
    scheduler = Scheduler(TOPOLOGY, root / "nodes", start_time=T0, arrivals_per_hour=0)
    if demo:
        scheduler.submit_demo_scenario()
    lustre = LustreJobStats.from_topology(TOPOLOGY, seed=seed)
    assert lustre is not None
    snapshots = []
    t = T0
    while t <= T0 + seconds:
        scheduler.tick(t)
        lustre.advance(t, scheduler.jobs.values())
        paths = lustre.write(root / "lustre")
        snapshots.append({p.stem: read_job_stats(p.read_text()) for p in paths})
        t += step
    return scheduler, lustre, snapshots


def test_one_file_per_server_with_the_real_layout(tmp_path: Path) -> None:
    scheduler, lustre, snapshots = _run(tmp_path, 60.0)
    assert lustre.servers == ("oss1", "oss2", "mds1")  # 8 OSTs, 4 per OSS, and the MDT
    files = sorted(p.name for p in (tmp_path / "lustre").iterdir())
    assert files == ["mds1.job_stats", "oss1.job_stats", "oss2.job_stats"]  # no temp file left
    oss1 = (tmp_path / "lustre" / "oss1.job_stats").read_text()
    headers = [line for line in oss1.splitlines() if HEADER.match(line)]
    assert headers == [f"obdfilter.scratch-OST000{i}.job_stats=" for i in range(4)]
    assert (
        (tmp_path / "lustre" / "mds1.job_stats")
        .read_text()
        .startswith('mdt.scratch-MDT0000.job_stats=\njob_stats:\n- job_id:          "')
    )
    last = snapshots[-1]
    uid_of = {job.job_id: job for job in scheduler.jobs.values()}
    for server, entries in last.items():
        assert entries
        for entry in entries:
            expected = MDT_OPERATIONS if server.startswith("mds") else OST_OPERATIONS
            assert tuple(entry.ops) == expected
            assert set(entry.times_ns) == {"snapshot_time", "start_time", "elapsed_time"}
            times = entry.times_ns
            assert times["elapsed_time"] == times["snapshot_time"] - times["start_time"]
            slurm_id, uid, host = entry.job_id.split(":")
            job = uid_of[int(slurm_id)]
            assert host in job.nodes and int(uid) >= 10_000
            for name, (samples, unit, low, high, total, squares, hist) in entry.ops.items():
                assert unit == ("bytes" if name.endswith("_bytes") else "usecs")
                assert (hist is not None) == name.endswith("_bytes")
                if samples:
                    assert low <= total / samples <= high
                    assert squares * samples >= total * total  # Cauchy-Schwarz
                if hist is not None:
                    assert sum(hist.values()) == samples
    # one entry per (job, node, target): the 8-GPU job on gpu01 reads 4 OSTs and uses the MDT
    straggler = next(j for j in scheduler.jobs.values() if j.profile is Profile.STRAGGLER)
    mine = [
        e
        for entries in last.values()
        for e in entries
        if e.job_id.startswith(f"{straggler.job_id}:")
    ]
    assert (
        len(mine) == len({(e.target, e.job_id) for e in mine}) == 2 * 5
    )  # from each of its two nodes


def test_counters_only_grow_for_an_entry(tmp_path: Path) -> None:
    _, _, snapshots = _run(tmp_path, 1300.0, step=50.0)  # past the first checkpoint (1200 s)
    previous: dict[tuple[str, str, str], tuple[int, int, int]] = {}
    started: dict[tuple[str, str], int] = {}
    grew = set()
    for snapshot in snapshots:
        for entries in snapshot.values():
            for entry in entries:
                # an entry idle past job_cleanup_interval is dropped; a later I/O starts anew
                born = entry.times_ns["start_time"]
                if started.setdefault((entry.target, entry.job_id), born) != born:
                    started[(entry.target, entry.job_id)] = born
                    for name in entry.ops:
                        previous.pop((entry.target, entry.job_id, name), None)
                for name, (samples, _, _, _, total, squares, _) in entry.ops.items():
                    key = (entry.target, entry.job_id, name)
                    before = previous.get(key, (0, 0, 0))
                    assert samples >= before[0] and total >= before[1] and squares >= before[2], key
                    if samples > before[0]:
                        grew.add(name)
                    previous[key] = (samples, total, squares)
    assert {"read", "read_bytes", "write", "write_bytes", "punch", "sync", "open", "mkdir"} <= grew


def test_the_data_starved_jobs_node_shows_the_slow_reads(tmp_path: Path) -> None:
    scheduler, _, snapshots = _run(tmp_path, 300.0, step=30.0)
    by_id = {job.job_id: job for job in scheduler.jobs.values()}
    per_job: dict[Profile, list[float]] = {}
    per_host: dict[str, list[int]] = {}
    for entries in snapshots[-1].values():
        for entry in entries:
            samples, _, _, _, total, _, _ = entry.ops["read"]
            if entry.target.endswith("MDT0000") or not samples:
                continue
            job = by_id[int(entry.job_id.split(":")[0])]
            per_job.setdefault(job.profile, []).append(total / samples / 1000)  # ms
            host = per_host.setdefault(entry.job_id.split(":")[2], [0, 0])
            host[0] += total
            host[1] += samples
    starved = per_job.pop(Profile.DATA_STARVED)
    assert starved and all(10 <= ms <= 40 for ms in starved)
    assert per_job and all(0.5 <= ms <= 2 for values in per_job.values() for ms in values)
    starved_node = next(j for j in scheduler.jobs.values() if j.name == "bert-finetune").nodes
    assert starved_node == ["gpu02"]
    mean_ms = {host: total / ops / 1000 for host, (total, ops) in per_host.items()}
    assert mean_ms["gpu02"] > 5 * mean_ms["gpu01"]


def test_entries_vanish_a_cleanup_interval_after_their_jobs_last_io(tmp_path: Path) -> None:
    scheduler = Scheduler(TOPOLOGY, tmp_path / "nodes", start_time=T0, arrivals_per_hour=0)
    short = scheduler.submit(
        name="eval", user="dave", account="speech", profile=Profile.HEALTHY, gpus=2,
        duration_seconds=300.0,
    )  # fmt: skip
    lustre = LustreJobStats.from_topology(TOPOLOGY, seed=1)
    assert lustre is not None

    def ids_at(t: float) -> set[str]:
        scheduler.tick(t)
        lustre.advance(t, scheduler.jobs.values())
        return {e.job_id for e in lustre.entries()}

    assert ids_at(T0) == set()  # no I/O yet: no entry
    for t in range(20, 300, 20):
        [job_id] = ids_at(T0 + t)  # one node, so one job id on every target
        assert job_id.startswith(f"{short.job_id}:") and job_id.endswith(":gpu01")
    ended = ids_at(T0 + 300)
    assert short.end_time == T0 + 300
    assert ended and ids_at(T0 + 300 + JOB_CLEANUP_INTERVAL_SECONDS - 1) == ended
    snapshot_ns = {e.latest_ns for e in lustre.entries()}
    assert max(snapshot_ns) == round((T0 + 300) * 1e9)  # frozen at the last I/O, not the read
    assert ids_at(T0 + 300 + JOB_CLEANUP_INTERVAL_SECONDS + 1) == set()
    text = "".join(lustre.render(s) for s in lustre.servers)
    assert "job_id" not in text and text.count("job_stats:") == 9


def test_the_same_seed_writes_the_same_files(tmp_path: Path) -> None:
    def content(root: Path, seed: int) -> str:
        _run(root, 120.0, seed=seed)
        return "".join((root / "lustre" / f"{s}.job_stats").read_text() for s in ("oss1", "mds1"))

    first = content(tmp_path / "a", 5)
    assert first == content(tmp_path / "b", 5)
    assert first != content(tmp_path / "c", 6)


def test_no_job_writes_the_datasets_pool_but_an_incident_does(tmp_path: Path) -> None:
    """The topology's ``dataset_targets`` are read, never written, by the jobs' checkpoints and
    logs (over 2 checkpoint intervals); the live incident's burst lands there in bulk RPCs."""
    assert TOPOLOGY.storage["dataset_targets"] == ["scratch-OST0006", "scratch-OST0007"]
    scheduler, lustre, snapshots = _run(tmp_path, 2500.0, step=100.0)
    pool = set(TOPOLOGY.storage["dataset_targets"])
    entries = [e for server in snapshots[-1].values() for e in server]
    written = {e.target for e in entries if e.ops.get("write_bytes", (0,))[0] > 0}
    read = {e.target for e in entries if e.ops.get("read_bytes", (0,))[0] > 0}
    assert written and not written & pool and pool <= read
    job = min(scheduler.jobs.values(), key=lambda j: j.job_id)
    lustre.write_burst(job, "gpu01", "scratch-OST0006", 2 * 2**30, T0 + 2600.0)
    [burst] = [
        e
        for e in read_job_stats((lustre.write(tmp_path / "lustre")[1]).read_text())
        if e.target == "scratch-OST0006"
        and e.job_id.startswith(f"{job.job_id}:")
        and e.job_id.endswith(":gpu01")
    ]
    samples, _unit, _min, _max, total, _sumsq, hist = burst.ops["write_bytes"]
    assert (samples, total, hist) == (128, 2 * 2**30, {16 * 2**20: 128})


def test_no_lustre_files_without_a_lustre_filesystem() -> None:
    with pytest.raises(ValueError, match="OST"):
        LustreJobStats(server_layout("fs", object_targets=0))


def test_the_running_twin_writes_the_spool_and_names_it(tmp_path: Path) -> None:
    spool = tmp_path / "lustre"
    with TwinCluster(TOPOLOGY, tmp_path, seed=1, speed=60.0, arrivals_per_hour=0) as twin:
        info = json.loads((tmp_path / "twin.json").read_text())
        assert info["lustre_dir"] == str(spool) == str(twin.lustre_dir)
        assert sorted(p.name for p in spool.glob("*.job_stats")) == [
            "mds1.job_stats", "oss1.job_stats", "oss2.job_stats",
        ]  # fmt: skip
        deadline = time.monotonic() + 10
        hosts: set[str] = set()
        while hosts != {"gpu01", "gpu02"} and time.monotonic() < deadline:
            time.sleep(0.1)
            entries = read_job_stats((spool / "mds1.job_stats").read_text())
            hosts = {e.job_id.split(":")[2] for e in entries}
    assert hosts == {"gpu01", "gpu02"}  # the ticker keeps rewriting the files


def test_the_twins_files_give_storage_evidence_against_the_data_starved_node(
    tmp_path: Path,
) -> None:
    """The twin's snapshots, as rows of the ``lustre_job_stats`` columns, through the storage
    analysis: gpu02 (the data-starved job's node) reads an order of magnitude slower."""
    import polars as pl

    from hpcscope.analysis.traces.storage_evidence import node_storage, storage_evidence

    *_, snapshots = _run(tmp_path, 120.0, step=30.0)
    rows = []
    for snapshot in snapshots:
        for server, entries in snapshot.items():
            for entry in entries:
                slurm_id, _, host = entry.job_id.split(":")
                for op, (samples, unit, low, high, total, _, _) in entry.ops.items():
                    rows.append(
                        {
                            "ts": entry.times_ns["snapshot_time"] // 1000,
                            "server": server,
                            "target": entry.target,
                            "component": "mdt" if "-MDT" in entry.target else "ost",
                            "job_id_raw": entry.job_id,
                            "job_id": slurm_id,
                            "host": host,
                            "operation": op,
                            "unit": unit,
                            "samples": float(samples),
                            "sum_value": float(total),
                            "min_value": float(low),
                            "max_value": float(high),
                            "start_ts": entry.times_ns["start_time"] // 1000,
                        }
                    )
    frame = pl.DataFrame(rows).with_columns(pl.col("ts", "start_ts").cast(pl.Datetime("us")))
    storage = node_storage(frame)
    slow, fast = storage["gpu02"], storage["gpu01"]
    assert slow.mean_read_latency_seconds is not None and fast.mean_read_latency_seconds
    assert 0.010 <= slow.mean_read_latency_seconds <= 0.040
    assert 0.0005 <= fast.mean_read_latency_seconds <= 0.002
    assert slow.metadata_ops > 0 and fast.write_bytes > 0
    [item] = storage_evidence([1], {0: "gpu01", 1: "gpu02"}, storage)[1]
    assert item.supports and "per read RPC on gpu02" in item.summary
