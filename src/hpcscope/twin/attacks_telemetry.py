"""The twin attacks (and behaves) in telemetry: scenarios for the rules over InfiniBand port
counters, DCGM samples, NVML process lists, Lustre changelog and job_stats.

Each :class:`~hpcscope.twin.attacks.Scenario` here carries what the collectors would read
during one attack or one benign activity (``pages``, ``job_stats``, ``changelog``,
``compute_apps``), Slurm's records of its jobs and GPU allocations, the site's rule lists it
assumes (registered datasets, maintenance windows), when the rules run, and the alerts it must
raise (``expected``: rule id -> distinct alerts; ``severities``). ``bench/detection_quality.py``
replays them through the production parsers, store and rules.

Attacks follow ``security.md`` §9: idle node sending 2 GB/s [RD-1]; DP node at 1.8x median
transmit [RD-3, RD-2]; 60 MB/s residual for 1 h [RD-2b; RD-2 silent]; a counter reset hiding
traffic [RD-6]; P_Key probing [RD-5]; a correlated residual pair [RD-7]; busy GPU with empty
``hpc_job`` [SC-4]; 30 GiB FB used after the epilog [GM-1, CRITICAL with an orphan process];
another job's process on a GPU [GM-2]; a foreign rename in a dataset [DP-1]; a manifest
overwrite [DP-2, DP-1]; a training job writing the dataset's OSTs [DP-4]. Benign: nccl-tests
in an allocation, multi-hour DDP with checkpoints, heavy Lustre reads, a maintenance reset, the
GPU lifecycle of back-to-back jobs, a curation job adding shards.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hpcscope.twin.attacks import Scenario
from hpcscope.twin.benign_telemetry import (
    benign_curation,
    benign_gpu_lifecycle,
    benign_heavy_reads,
    benign_maintenance_reset,
    benign_nccl_tests,
    benign_training_checkpoints,
)
from hpcscope.twin.security_events import Proc
from hpcscope.twin.telemetry_scenery import (
    DATASET_LISTS,
    DATASET_OSTS,
    FIDS,
    GB,
    MANIFEST_FID,
    MB,
    MDT,
    MINUTE,
    TRAIN_FID,
    allocation_rows,
    at_seconds,
    data_parallel,
    job_row,
    quiet,
    spread,
    with_extra,
)
from hpcscope.twin.telemetry_traces import (
    SCRAPE_SECONDS,
    SECOND_NS,
    GpuState,
    IbNode,
    LustreFlow,
    PortTraffic,
    changelog_record,
    compute_apps,
    dcgm_pages,
    gpus,
    ib_pages,
    job_stats_snapshots,
)

# ---------------------------------------------------------------------- InfiniBand attacks


def idle_node_exfiltration(t0: int) -> Scenario:
    """A node with no job sends 2 GB/s on one rail for 3 minutes (``ib_write_bw``): RD-1."""
    s = Scenario("ib-idle-node-2gbs", benign=False, node="gpu03", job_id=None, gpu=2)
    s.pages = ib_pages(
        t0,
        [IbNode("gpu03", lambda t: {2: (0.0, 2 * GB)} if 5 * MINUTE < t <= 8 * MINUTE else {})],
        duration_seconds=10 * MINUTE,
        seed=1,
    )
    s.expected = {"RD-1": 1}
    s.onset_ns = t0 + int(5 * MINUTE * SECOND_NS)
    s.evaluate_at_ns = t0 + int(10 * MINUTE * SECOND_NS)
    return s


def dp_node_over_median(t0: int) -> Scenario:
    """In a 4-node DDP job one node sends 1.8x the median for 4 minutes: RD-3 and RD-2."""
    nodes = ("gpu01", "gpu02", "gpu03", "gpu04")
    s = Scenario("ib-dp-node-1.8x-median", benign=False, node="gpu02", gpu=5)
    base = 5 * GB

    def attacker(t: float) -> PortTraffic:
        traffic = spread(base, base)
        return with_extra(traffic, 5, tx=0.8 * base) if 10 * MINUTE < t <= 14 * MINUTE else traffic

    s.pages = ib_pages(
        t0,
        [IbNode(n, attacker if n == "gpu02" else data_parallel(base)) for n in nodes],
        duration_seconds=16 * MINUTE,
        seed=2,
    )
    s.slurm_jobs = [job_row(t0, "4410001", nodes)]
    s.expected = {"RD-3": 1, "RD-2": 1}
    s.onset_ns = t0 + int(10 * MINUTE * SECOND_NS)
    s.evaluate_at_ns = t0 + int(16 * MINUTE * SECOND_NS)
    return s


def low_and_slow(t0: int) -> Scenario:
    """A DDP node leaks 60 MB/s beyond its job's traffic for an hour: RD-2b (RD-2 silent)."""
    nodes = ("gpu05", "gpu06", "gpu07", "gpu08")
    s = Scenario("ib-low-and-slow-60mbs", benign=False, node="gpu06", job_id="4410002", gpu=1)
    base = 2 * GB

    def leaking(t: float) -> PortTraffic:
        traffic = spread(base, base)
        return with_extra(traffic, 1, tx=60 * MB) if t > 6 * MINUTE else traffic

    s.pages = ib_pages(
        t0,
        [IbNode(n, leaking if n == "gpu06" else data_parallel(base)) for n in nodes],
        duration_seconds=66 * MINUTE,
        seed=3,
    )
    s.slurm_jobs = [job_row(t0, "4410002", nodes)]
    s.expected = {"RD-2b": 1}
    s.severities = {"RD-2b": "MEDIUM"}
    s.evaluate_at_ns = t0 + int(66 * MINUTE * SECOND_NS)
    return s


def counter_reset(t0: int) -> Scenario:
    """Root on an idle node sends 1 GB/s for 30 s, then ``perfquery -R`` clears the port: the
    counters go down and hide the burst (RD-1 needs 60 s): RD-6."""
    s = Scenario("ib-counter-reset-hides-burst", benign=False, node="gpu07", job_id=None, gpu=0)
    burst = IbNode(
        "gpu07",
        lambda t: {0: (0.0, 1 * GB)} if 4 * MINUTE < t <= 4 * MINUTE + 30 else {},
        resets={4 * MINUTE + 45: (0,)},
    )
    s.pages = ib_pages(t0, [burst], duration_seconds=8 * MINUTE, seed=4)
    s.expected = {"RD-6": 1}
    s.evaluate_at_ns = t0 + int(8 * MINUTE * SECOND_NS)
    return s


def pkey_probing(t0: int) -> Scenario:
    """A job's process probes other partitions: the HCA drops packets on P_Key: RD-5."""
    s = Scenario("ib-pkey-probing", benign=False, node="gpu01", gpu=3)
    probe = IbNode(
        "gpu01",
        quiet,
        constraint_errors={6 * MINUTE + k * SCRAPE_SECONDS: (3, 10.0) for k in range(4)},
    )
    s.pages = ib_pages(t0, [probe], duration_seconds=8 * MINUTE, seed=5)
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu01"])]
    s.expected = {"RD-5": 1}
    s.evaluate_at_ns = t0 + int(8 * MINUTE * SECOND_NS)
    return s


def correlated_pair(t0: int) -> Scenario:
    """Two single-node jobs of different accounts: one node's unexplained transmit is the
    other's unexplained receive, below RD-2's floor: RD-7."""
    s = Scenario("ib-residual-pair", benign=False, node="gpu01", gpu=4)

    def wave(t: float) -> float:
        if not 8 * MINUTE < t <= 14 * MINUTE:
            return 0.0
        return 65 * MB + 25 * MB * math.sin(2 * math.pi * t / 120.0)

    s.pages = ib_pages(
        t0,
        [IbNode("gpu01", lambda t: {4: (0.0, wave(t))}),
         IbNode("gpu02", lambda t: {4: (wave(t), 0.0)})],
        duration_seconds=14 * MINUTE,
        seed=6,
    )  # fmt: skip
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu01"]), job_row(t0, "4410002", ["gpu02"])]
    s.expected = {"RD-7": 1}
    s.evaluate_at_ns = t0 + int(14 * MINUTE * SECOND_NS)
    return s


# ---------------------------------------------------------------------- GPU attacks


def busy_gpu_without_job(t0: int) -> Scenario:
    """GPU 5 of a node without jobs computes for 4 minutes (a miner started by root): SC-4."""
    s = Scenario("gpu-busy-without-job", benign=False, node="gpu03", job_id=None, gpu=5)

    def state(t: float, gpu: int) -> GpuState:
        if gpu == 5 and 3 * MINUTE < t <= 7 * MINUTE:
            return GpuState(util_ratio=0.97, sm_active_ratio=0.81, fb_used_mib=2300.0)
        return GpuState()

    s.pages = dcgm_pages(t0, "gpu03", state, duration_seconds=8 * MINUTE)
    s.expected = {"SC-4": 1}
    s.onset_ns = t0 + int(3 * MINUTE * SECOND_NS)
    s.evaluate_at_ns = t0 + int(8 * MINUTE * SECOND_NS)
    return s


def _after_epilog(t0: int, s: Scenario, gpu: int, held_mib: float) -> None:
    def state(t: float, g: int) -> GpuState:
        if t <= 10 * MINUTE:
            return GpuState(util_ratio=0.9, sm_active_ratio=0.7, fb_used_mib=61000.0,
                            job_id="4410006")  # fmt: skip
        return GpuState(fb_used_mib=held_mib if g == gpu else 400.0)

    s.pages = dcgm_pages(t0, "gpu01", state, duration_seconds=14 * MINUTE)
    s.slurm_jobs = [job_row(t0, "4410006", ["gpu01"], end=10 * MINUTE)]
    s.allocations = allocation_rows(t0, "4410006", "gpu01", range(8), end=10 * MINUTE)
    s.evaluate_at_ns = t0 + int(14 * MINUTE * SECOND_NS)


def memory_after_epilog(t0: int) -> Scenario:
    """30 GiB stay in GPU 2's framebuffer after the job's epilog: GM-1 (HIGH)."""
    s = Scenario("gpu-memory-after-epilog", benign=False, job_id="4410006", gpu=2)
    _after_epilog(t0, s, 2, 30 * 1024.0)
    s.expected = {"GM-1": 1}
    s.severities = {"GM-1": "HIGH"}
    s.onset_ns = t0 + int(10 * MINUTE * SECOND_NS)
    return s


def orphan_after_epilog(t0: int) -> Scenario:
    """A process that escaped the job's cgroup still holds GPU 6 after the epilog: GM-1
    CRITICAL (NVML lists it)."""
    s = Scenario("gpu-orphan-after-epilog", benign=False, job_id="4410006", gpu=6)
    _after_epilog(t0, s, 6, 20 * 1024.0)
    orphan = s.proc.add(Proc("gpu01", 5150, 1000, "/usr/bin/python3", "x.py", t0), None)
    uuid = gpus("gpu01")[6].uuid
    s.compute_apps = [
        ("gpu01", compute_apps([(t0 + int((11 * MINUTE + k * 15) * SECOND_NS), uuid,
                                 orphan.pid, "python3", 20 * 1024.0)]))
        for k in range(8)
    ]  # fmt: skip
    s.expected = {"GM-1": 1}
    s.severities = {"GM-1": "CRITICAL"}
    return s


def foreign_process(t0: int) -> Scenario:
    """bob's job (GPUs 4-7) starts a process on GPU 1, which alice's job holds: GM-2."""
    s = Scenario("gpu-foreign-process", benign=False, job_id="4410002", gpu=1)
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu01"]), job_row(t0, "4410002", ["gpu01"])]
    s.allocations = allocation_rows(t0, "4410001", "gpu01", range(4)) + allocation_rows(
        t0, "4410002", "gpu01", range(4, 8)
    )
    node_gpus = gpus("gpu01")
    for g in range(8):
        s.proc.add(Proc("gpu01", 2000 + g, 1000, "/usr/bin/python3", "train.py", t0),
                   "4410001" if g < 4 else "4410002")  # fmt: skip
    s.proc.add(Proc("gpu01", 4242, 1001, "/usr/bin/python3", "probe.py", t0), "4410002")
    for k in range(24):
        ts = t0 + int((MINUTE + k * 15) * SECOND_NS)
        rows = [(ts, node_gpus[g].uuid, 2000 + g, "python3", 60000.0) for g in range(8)]
        if 5 * MINUTE <= MINUTE + k * 15 <= 6 * MINUTE:
            rows.append((ts, node_gpus[1].uuid, 4242, "python3", 1200.0))
        s.compute_apps.append(("gpu01", compute_apps(rows)))
    s.expected = {"GM-2": 1}
    s.evaluate_at_ns = t0 + int(7 * MINUTE * SECOND_NS)
    return s


# ---------------------------------------------------------------------- Lustre attacks


def _reads(t0: int, job: str, node: str, rate: float, minutes: float) -> list[tuple[str, str]]:
    flows = [LustreFlow(f"{job}:0:{node}", ost, "read_bytes", lambda t: rate / 2)
             for ost in DATASET_OSTS]  # fmt: skip
    return job_stats_snapshots(t0, flows, duration_seconds=minutes * MINUTE)


def foreign_rename(t0: int) -> Scenario:
    """bob's job renames a shard of vision's dataset while alice's training reads it: DP-1
    CRITICAL."""
    s = Scenario("lustre-foreign-rename", benign=False, node="gpu02", job_id="4410002")
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu01"]), job_row(t0, "4410002", ["gpu02"])]
    s.job_stats = _reads(t0, "4410001", "gpu01", 2 * GB, 10)
    record = changelog_record(
        7, "RENME", at_seconds(t0, 6 * MINUTE), target_fid="[0:0x0:0x0]", jobid="4410002:0:gpu02",
        uid=1001, nid="10.1.0.12@o2ib", parent_fid=TRAIN_FID, name="shard-0042.tar",
        source=("[0x200000402:0x42:0x0]", TRAIN_FID, "shard-0042.tar.orig"),
    )  # fmt: skip
    s.changelog = [(MDT, record + "\n")]
    s.fids = dict(FIDS)
    s.rule_lists = DATASET_LISTS
    s.expected = {"DP-1": 1}
    s.severities = {"DP-1": "CRITICAL"}
    s.evaluate_at_ns = t0 + int(10 * MINUTE * SECOND_NS)
    return s


def manifest_overwrite(t0: int) -> Scenario:
    """bob's job truncates the dataset's manifest (to hide swapped shards): DP-2, DP-1."""
    s = Scenario("lustre-manifest-overwrite", benign=False, node="gpu02", job_id="4410002")
    s.slurm_jobs = [job_row(t0, "4410002", ["gpu02"])]
    s.changelog = [(MDT, changelog_record(
        9, "TRUNC", at_seconds(t0, 3 * MINUTE), target_fid=MANIFEST_FID, jobid="4410002:0:gpu02",
        uid=1001, nid="10.1.0.12@o2ib") + "\n")]  # fmt: skip
    s.fids = dict(FIDS)
    s.rule_lists = DATASET_LISTS
    s.expected = {"DP-2": 1, "DP-1": 1}
    s.severities = {"DP-2": "CRITICAL", "DP-1": "HIGH"}
    s.evaluate_at_ns = t0 + int(5 * MINUTE * SECOND_NS)
    return s


def training_writes_dataset(t0: int) -> Scenario:
    """alice's training job writes 200 MB/s to the dataset's OST for 2 minutes: DP-4."""
    s = Scenario("lustre-training-writes-dataset", benign=False)
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu01"])]
    flow = LustreFlow("4410001:0:gpu01", DATASET_OSTS[1], "write_bytes",
                      lambda t: 200 * MB if 2 * MINUTE < t <= 4 * MINUTE else 0.0)  # fmt: skip
    s.job_stats = job_stats_snapshots(t0, [flow], duration_seconds=5 * MINUTE)
    s.rule_lists = DATASET_LISTS
    s.expected = {"DP-4": 1}
    s.severities = {"DP-4": "MEDIUM"}
    s.evaluate_at_ns = t0 + int(5 * MINUTE * SECOND_NS)
    return s


SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    idle_node_exfiltration,
    dp_node_over_median,
    low_and_slow,
    counter_reset,
    pkey_probing,
    correlated_pair,
    busy_gpu_without_job,
    memory_after_epilog,
    orphan_after_epilog,
    foreign_process,
    foreign_rename,
    manifest_overwrite,
    training_writes_dataset,
    benign_nccl_tests,
    benign_training_checkpoints,
    benign_heavy_reads,
    benign_maintenance_reset,
    benign_gpu_lifecycle,
    benign_curation,
)


def scenarios(t0: int) -> list[Scenario]:
    """Every telemetry scenario, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in SCENARIOS]
