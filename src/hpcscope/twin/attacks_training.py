"""The twin's training-side scenarios: what the in-process recorder
(:mod:`hpcscope.integrity.training`) writes during an attack or a benign run, for W-4 and DP-5.

W-4: alice's job loads, with ``weights_only=False``, a checkpoint bob's job created (its
Lustre changelog ``CREAT`` names bob's job) [W-4]; benign: a job resumes from its own
account's checkpoint unsafely and reads a foreign one with ``weights_only=True`` [quiet].
DP-5: one shard of 16 trains at a loss far from the others window after window [DP-5, LOW];
benign: noisy shards, one outlier in a single window [quiet].
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

from hpcscope.model.training_events import FORMAT
from hpcscope.twin.attacks import Scenario
from hpcscope.twin.telemetry_scenery import (
    CHECKPOINT_FID,
    FIDS,
    MDT,
    MINUTE,
    allocation_rows,
    at_seconds,
    job_row,
)
from hpcscope.twin.telemetry_traces import SECOND_NS, changelog_record

NLP_CHECKPOINTS_FID = "[0x200000403:0x2:0x0]"
NLP_CHECKPOINTS = "/lustre/checkpoints/run-nlp"
UIDS = {"4410001": 1000, "4410002": 1001, "4410006": 1000}


def event_line(kind: str, *, job: str, node: str, gpu: int, rank: int, ts: float,
               **fields: object) -> str:  # fmt: skip
    """One line as :class:`hpcscope.integrity.training.TrainingRecorder` writes it."""
    record = {"format": FORMAT, "kind": kind, "job_id": job, "node": node, "gpu": gpu,
              "rank": rank, "pid": 5100 + rank, "ts": ts, **fields}  # fmt: skip
    return json.dumps(record, separators=(",", ":")) + "\n"


def _creat(t0: int, index: int, job: str, node: str, parent: str, name: str, seconds: float) -> str:
    return changelog_record(
        index, "CREAT", at_seconds(t0, seconds), target_fid=f"[0x200000403:0x1{index}:0x0]",
        jobid=f"{job}:0:{node}", uid=UIDS[job], nid="10.1.0.11@o2ib", parent_fid=parent,
        name=name,
    ) + "\n"  # fmt: skip


def _loads(t0: int, s: Scenario, job: str, node: str, loads: Sequence[tuple[str, bool, float]],
           *, minutes: float) -> None:  # fmt: skip
    """``job`` on ``node`` (GPUs 0-7) loads ``(path, weights_only, at seconds)`` on rank 0."""
    s.slurm_jobs = [job_row(t0, job, [node])]
    s.allocations = allocation_rows(t0, job, node, range(8))
    lines = "".join(
        event_line(
            "load",
            job=job,
            node=node,
            gpu=0,
            rank=0,
            ts=t0 / SECOND_NS + at,
            path=path,
            weights_only=safe,
            owner=None,
        )
        for path, safe, at in loads
    )
    s.training_events = [(job, 0, lines)]
    s.fids = dict(FIDS) | {NLP_CHECKPOINTS_FID: NLP_CHECKPOINTS}
    s.evaluate_at_ns = t0 + int(minutes * MINUTE * SECOND_NS)


def foreign_pickle_load(t0: int) -> Scenario:
    """alice's job loads bob's job's checkpoint with ``weights_only=False``: W-4."""
    s = Scenario("w4-foreign-pickle-load", benign=False, node="gpu01", job_id="4410001", gpu=0)
    s.changelog = [(MDT, _creat(t0, 1, "4410002", "gpu02", NLP_CHECKPOINTS_FID, "model.pt", 60))]
    _loads(t0, s, "4410001", "gpu01", [(f"{NLP_CHECKPOINTS}/model.pt", False, 5 * MINUTE)],
           minutes=8)  # fmt: skip
    s.slurm_jobs.append(job_row(t0, "4410002", ["gpu02"]))
    s.expected = {"W-4": 1}
    s.severities = {"W-4": "MEDIUM"}
    return s


def benign_own_checkpoint(t0: int) -> Scenario:
    """A vision job resumes from a vision job's checkpoint with ``weights_only=False`` (its own
    account's optimizer state) and reads nlp's weights safely (``weights_only=True``)."""
    s = Scenario("benign-w4-own-checkpoint-resume", benign=True, node="gpu03", gpu=0)
    own = _creat(t0, 2, "4410001", "gpu01", CHECKPOINT_FID, "step-1000.pt", 60)
    foreign = _creat(t0, 3, "4410002", "gpu02", NLP_CHECKPOINTS_FID, "model.pt", 90)
    s.changelog = [(MDT, own + foreign)]
    _loads(t0, s, "4410006", "gpu03",
           [("/lustre/checkpoints/run-c/step-1000.pt", False, 4 * MINUTE),
            (f"{NLP_CHECKPOINTS}/model.pt", True, 5 * MINUTE)], minutes=8)  # fmt: skip
    s.slurm_jobs += [job_row(t0, "4410001", ["gpu01"]), job_row(t0, "4410002", ["gpu02"])]
    return s


def _shard_windows(t0: int, s: Scenario, loss: Callable[[int, int, random.Random], float],
                   *, windows: int = 6, shards: int = 16, seed: int) -> None:  # fmt: skip
    """alice's job on gpu01, 2 ranks (GPUs 0, 1), each seeing every shard each window of 200
    steps (one every 2 minutes); ``loss(window, shard, rng)`` a batch's loss."""
    rng = random.Random(seed)
    job, node = "4410001", "gpu01"
    s.slurm_jobs = [job_row(t0, job, [node])]
    s.allocations = allocation_rows(t0, job, node, range(8))
    for rank in range(2):
        lines = []
        for w in range(windows):
            per = {}
            for shard in range(shards):
                batches = [loss(w, shard, rng) for _ in range(6)]
                per[f"shard-{shard:04d}"] = [sum(batches) / len(batches), len(batches)]
            lines.append(event_line("shard_loss", job=job, node=node, gpu=rank, rank=rank,
                                    ts=t0 / SECOND_NS + (w + 1) * 2 * MINUTE, window=w,
                                    shards=per))  # fmt: skip
        s.training_events.append((job, rank, "".join(lines)))
    s.evaluate_at_ns = t0 + int((windows * 2 + 1) * MINUTE * SECOND_NS)


def poisoned_shard(t0: int) -> Scenario:
    """Shard 13 (relabelled by an attacker) trains at +0.8 loss from window 2 on: DP-5."""
    s = Scenario("dp5-poisoned-shard", benign=False, node="gpu01", job_id="4410001", gpu=0)

    def loss(w: int, shard: int, rng: random.Random) -> float:
        base = 2.4 - 0.1 * w + rng.gauss(0.0, 0.05)
        return base + (0.8 if shard == 13 and w >= 2 else 0.0)

    _shard_windows(t0, s, loss, seed=41)
    s.expected = {"DP-5": 1}
    s.severities = {"DP-5": "LOW"}
    return s


def benign_noisy_shards(t0: int) -> Scenario:
    """Shards of different difficulty, noisy batches; one shard spikes in one window only
    (a bad batch): quiet."""
    s = Scenario("benign-dp5-noisy-shards", benign=True, node="gpu01", gpu=0)

    def loss(w: int, shard: int, rng: random.Random) -> float:
        spike = 1.5 if (shard, w) == (5, 3) else 0.0
        return 2.4 - 0.1 * w + 0.01 * (shard % 4) + rng.gauss(0.0, 0.15) + spike

    _shard_windows(t0, s, loss, seed=42)
    return s


SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    foreign_pickle_load,
    benign_own_checkpoint,
    poisoned_shard,
    benign_noisy_shards,
)


def training_scenarios(t0: int) -> list[Scenario]:
    """Every training-side scenario, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in SCENARIOS]
