"""Benign telemetry scenarios: what the telemetry rules must stay quiet on (``security.md`` §9)."""

from __future__ import annotations

import math

from hpcscope.twin.attacks import Scenario
from hpcscope.twin.security_events import Proc
from hpcscope.twin.telemetry_scenery import (
    CHECKPOINT_FID,
    CHECKPOINT_OST,
    DATASET_LISTS,
    DATASET_OSTS,
    FIDS,
    GB,
    MB,
    MDT,
    MINUTE,
    TRAIN_FID,
    allocation_rows,
    at_seconds,
    job_row,
    quiet,
    spread,
)
from hpcscope.twin.telemetry_traces import (
    PORTS_PER_NODE,
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


def benign_nccl_tests(t0: int) -> Scenario:
    """nccl-tests ``all_reduce_perf -b 1M -e 8G -f 2`` across two nodes of an allocation:
    traffic doubles every 20 s up to the fabric's bus bandwidth, the same on both nodes."""
    s = Scenario("benign-ib-nccl-tests", benign=True)
    nodes = ("gpu01", "gpu02")

    def sweep(t: float) -> PortTraffic:
        if not MINUTE < t <= 14 * MINUTE:
            return {}
        rate = min(45 * GB, 1 * MB * 2 ** ((t - MINUTE) / 20.0))
        return spread(rate, rate)

    s.pages = ib_pages(t0, [IbNode(n, sweep) for n in nodes], duration_seconds=16 * MINUTE,
                       seed=11)  # fmt: skip
    s.slurm_jobs = [job_row(t0, "4410001", nodes)]
    s.evaluate_at_ns = t0 + int(16 * MINUTE * SECOND_NS)
    return s


def benign_training_checkpoints(t0: int) -> Scenario:
    """Two hours of 4-node DDP (5 GB/s AllReduce per node) reading its dataset over LNet and
    writing a checkpoint every 30 minutes (2.5 GB/s per node for a minute), as job_stats and
    the changelog record it."""
    s = Scenario("benign-ib-ddp-checkpoints", benign=True, job_id="4410006")
    nodes = ("gpu01", "gpu02", "gpu03", "gpu04")
    read, write = 300 * MB, 2.5 * GB

    def checkpointing(t: float) -> bool:
        return t % (30 * MINUTE) < MINUTE and t > 10 * MINUTE

    def traffic(t: float) -> PortTraffic:
        if t <= 0:
            return {}
        tx = 5 * GB + (write if checkpointing(t) else 0.0)
        return spread(5 * GB + read, tx)

    s.pages = ib_pages(t0, [IbNode(n, traffic) for n in nodes], duration_seconds=120 * MINUTE,
                       seed=12)  # fmt: skip
    flows = [LustreFlow(f"4410006:0:{n}", DATASET_OSTS[0], "read_bytes", lambda t: read)
             for n in nodes]  # fmt: skip
    flows += [LustreFlow(f"4410006:0:{n}", CHECKPOINT_OST, "write_bytes",
                         lambda t: write if checkpointing(t) else 0.0) for n in nodes]  # fmt: skip
    s.job_stats = job_stats_snapshots(t0, flows, duration_seconds=120 * MINUTE)
    s.changelog = [(MDT, "".join(
        changelog_record(100 + i, "CREAT", at_seconds(t0, (30 * (i // 4) + 30) * MINUTE),
                         target_fid=f"[0x200000403:0x{16 + i:x}:0x0]", jobid=f"4410006:0:{n}",
                         uid=1000, nid="10.1.0.11@o2ib", parent_fid=CHECKPOINT_FID,
                         name=f"step-{i // 4}-rank-{i % 4}.pt") + "\n"
        for i, n in enumerate(nodes * 3)))]  # fmt: skip
    s.fids = dict(FIDS)
    s.slurm_jobs = [job_row(t0, "4410006", nodes)]
    s.rule_lists = DATASET_LISTS
    s.evaluate_at_ns = t0 + int(120 * MINUTE * SECOND_NS)
    return s


def benign_heavy_reads(t0: int) -> Scenario:
    """A single-node job streams its dataset at 1-8 GB/s over LNet (InfiniBand receive)."""
    s = Scenario("benign-lustre-heavy-reads", benign=True, node="gpu03", job_id="4410006")

    def rate(t: float) -> float:
        return 0.0 if t <= 0 else 4.5 * GB + 3.5 * GB * math.sin(2 * math.pi * t / 600.0)

    s.pages = ib_pages(t0, [IbNode("gpu03", lambda t: spread(rate(t), 0.0))],
                       duration_seconds=20 * MINUTE, seed=13)  # fmt: skip
    flows = [LustreFlow("4410006:0:gpu03", ost, "read_bytes", lambda t: rate(t) / 2)
             for ost in DATASET_OSTS]  # fmt: skip
    s.job_stats = job_stats_snapshots(t0, flows, duration_seconds=20 * MINUTE)
    s.slurm_jobs = [job_row(t0, "4410006", ["gpu03"])]
    s.rule_lists = DATASET_LISTS
    s.evaluate_at_ns = t0 + int(20 * MINUTE * SECOND_NS)
    return s


def benign_maintenance_reset(t0: int) -> Scenario:
    """An admin clears every port of an idle node with ``perfquery -R`` in a maintenance
    window the site registered (RD-6's ``maintenance_windows``)."""
    s = Scenario("benign-ib-maintenance-reset", benign=True, node="gpu08", job_id=None)
    node = IbNode("gpu08", quiet, resets={3 * MINUTE: tuple(range(PORTS_PER_NODE))})
    s.pages = ib_pages(t0, [node], duration_seconds=6 * MINUTE, seed=14)
    start, end = at_seconds(t0, 2 * MINUTE), at_seconds(t0, 4 * MINUTE)
    s.rule_lists = {"RD-6": {"maintenance_windows": [
        f"gpu0[78] {start.isoformat()}Z {end.isoformat()}Z"]}}  # fmt: skip
    s.evaluate_at_ns = t0 + int(6 * MINUTE * SECOND_NS)
    return s


def benign_gpu_lifecycle(t0: int) -> Scenario:
    """Back-to-back jobs on one node: the mapping lags the first job's start by a scrape, the
    epilog frees the memory, the next job's processes are its own."""
    s = Scenario("benign-gpu-lifecycle", benign=True, node="gpu04", job_id="4410002")

    def state(t: float, gpu: int) -> GpuState:
        if t <= 6 * MINUTE:
            return GpuState(0.9, 0.7, 61000.0, None if t < SCRAPE_SECONDS else "4410001")
        if t >= 8 * MINUTE:
            return GpuState(0.9, 0.7, 58000.0, None if t < 8 * MINUTE + 15 else "4410002")
        return GpuState(fb_used_mib=400.0 if t > 6 * MINUTE + 15 else 61000.0)

    s.pages = dcgm_pages(t0, "gpu04", state, duration_seconds=13 * MINUTE)
    s.slurm_jobs = [job_row(t0, "4410001", ["gpu04"], end=6 * MINUTE),
                    job_row(t0, "4410002", ["gpu04"], start=8 * MINUTE)]  # fmt: skip
    s.allocations = allocation_rows(t0, "4410001", "gpu04", range(8), end=6 * MINUTE)
    s.allocations += allocation_rows(t0, "4410002", "gpu04", range(8), start=8 * MINUTE)
    node_gpus = gpus("gpu04")
    for g in range(8):
        s.proc.add(Proc("gpu04", 6000 + g, 1001, "/usr/bin/python3", "train.py", t0), "4410002")
    for k in range(16):
        ts = t0 + int((8 * MINUTE + 15 + k * 15) * SECOND_NS)
        rows = [(ts, node_gpus[g].uuid, 6000 + g, "python3", 58000.0) for g in range(8)]
        s.compute_apps.append(("gpu04", compute_apps(rows)))
    s.evaluate_at_ns = t0 + int(13 * MINUTE * SECOND_NS)
    return s


def benign_curation(t0: int) -> Scenario:
    """vision's curation job adds shards to its own dataset (CREAT records, OST writes)."""
    s = Scenario("benign-lustre-curation", benign=True, node="gpu03", job_id="4410006")
    s.slurm_jobs = [job_row(t0, "4410006", ["gpu03"], partition="curation")]
    records = [
        changelog_record(
            200 + i, "CREAT", at_seconds(t0, MINUTE + i),
            target_fid=f"[0x200000402:0x{0x100 + i:x}:0x0]",
            jobid="4410006:0:gpu03", uid=1000, nid="10.1.0.13@o2ib", parent_fid=TRAIN_FID,
            name=f"shard-{1000 + i}.tar",
        )
        for i in range(5)
    ]  # fmt: skip
    s.changelog = [(MDT, "".join(r + "\n" for r in records))]
    flow = LustreFlow("4410006:0:gpu03", DATASET_OSTS[0], "write_bytes", lambda t: 500 * MB)
    s.job_stats = job_stats_snapshots(t0, [flow], duration_seconds=3 * MINUTE)
    s.fids = dict(FIDS)
    s.rule_lists = DATASET_LISTS
    s.evaluate_at_ns = t0 + int(4 * MINUTE * SECOND_NS)
    return s
