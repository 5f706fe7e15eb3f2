"""Detection quality and cost of the gradient-integrity hook on real gloo ranks (issue 13).

Real PyTorch DDP on ``--world`` CPU gloo processes (a small MLP, a tanh-teacher task), the
hpcscope hook registered on every rank, and per seed: benign runs (different seeds, learning
rates and data orders), and one rank attacking from step 3: x10 scaling, sign flip, Gaussian
noise (noise norm = ``--noise`` x the gradient norm), and a liar (sends -g, reports g). The
spools are replayed through the service's evaluation with the rules of
``deploy/rules/gradient-integrity.yaml``; then one run trains the same model twice in the same
processes, with and without the hook, alternating steps, for the step-time overhead.

    .venv/bin/python bench/gradient_integrity.py --seeds 20

Prints one line per scenario family, then one JSON line last::

    {"tpr_scale10": a, "tpr_signflip": b, "tpr_noise": c, "liar_caught": "x/20",
     "fpr_per_rank_step": f, "overhead_ratio": o}

TPR: share of attacked steps, after the first two attacked steps, at which a rule named the
attacking rank. Liar caught: seeds where GI-3 fired within 3 steps of the first lie. FPR:
benign rank-steps a rule named (a finding about the whole job counts once). Overhead: per
rank, median hooked step time / median step time without a comm hook; the median over ranks
(also printed: against PyTorch's ``allreduce_hook``, which the hook wraps; the ratio of
means, which includes the checksum steps; and the ratio of the processes' CPU time per step,
which other load on a shared machine disturbs less than wall time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.integrity_ranks import Attack, Scenario, generate  # noqa: E402
from tests.support.integrity_scoring import Score, findings, score, site_rules  # noqa: E402

ATTACKS = ("scale", "signflip", "noise", "liar")
BENIGN_LRS = (0.005, 0.01, 0.02)


def scenarios(seeds: int, steps: int, world: int, noise: float) -> list[Scenario]:
    out: list[Scenario] = []
    for seed in range(seeds):
        lr = BENIGN_LRS[seed % len(BENIGN_LRS)]
        out.append(Scenario(f"benign-{seed}", seed=seed, lr=lr, data_seed=seed, steps=steps))
        for kind in ATTACKS:
            factor = {"scale": 10.0, "noise": noise}.get(kind, 1.0)
            attack = Attack(kind, rank=seed % world, start_step=3, factor=factor)
            out.append(
                Scenario(
                    f"{kind}-{seed}", seed=seed, lr=0.01, data_seed=100 + seed, steps=steps,
                    attack=attack,
                )
            )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--noise", type=float, default=3.0)
    parser.add_argument("--overhead-steps", type=int, default=60)
    parser.add_argument("--overhead-batch", type=int, default=1024)
    args = parser.parse_args()
    rules = site_rules()
    overhead = Scenario(
        "overhead", hidden=1024, inputs=256, batch_size=args.overhead_batch, checksum_every=50,
        overhead_steps=args.overhead_steps,
    )  # fmt: skip
    matrix = scenarios(args.seeds, args.steps, args.world, args.noise)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = generate([*matrix, overhead], Path(tmp), world_size=args.world, timeout_seconds=3600)
        scores: dict[str, list[Score]] = {"benign": [], **{kind: [] for kind in ATTACKS}}
        for scenario in matrix:
            found, steps = findings(run.job_dir(scenario.name), rules)
            family = scenario.attack.kind if scenario.attack else "benign"
            scores[family].append(score(scenario, found, steps, args.world))
        timings = list(run.timings["overhead"].values())
        ratios = [statistics.median(t["hooked"]) / statistics.median(t["plain"]) for t in timings]
        wrapped = [
            statistics.median(t["hooked"]) / statistics.median(t["allreduce_hook"]) for t in timings
        ]
        cpu_ratio = statistics.median(
            statistics.median(t["cpu_hooked"]) / statistics.median(t["cpu_plain"]) for t in timings
        )
        mean_ratio = statistics.mean(
            statistics.mean(t["hooked"]) / statistics.mean(t["plain"]) for t in timings
        )
        plain_ms = statistics.median(statistics.median(t["plain"]) * 1000 for t in timings)
        cost_ms = statistics.median(
            (statistics.median(t["hooked"]) - statistics.median(t["plain"])) * 1000 for t in timings
        )

    def tpr(kind: str) -> float:
        attacked = sum(s.attacked_steps for s in scores[kind])
        return sum(s.detected_steps for s in scores[kind]) / attacked if attacked else 0.0

    for kind in ATTACKS:
        firsts = [s.first_detection for s in scores[kind]]
        print(
            f"{kind:9s} runs {len(firsts):3d}  TPR {tpr(kind):.4f}  first detection (steps "
            f"after the attack starts) {sorted(f for f in firsts if f is not None)[:3]}..., "
            f"never: {sum(f is None for f in firsts)}"
        )
    benign = scores["benign"]
    rank_steps = sum(s.benign_rank_steps for s in benign)
    false = sum(s.false_rank_steps for s in benign)
    print(f"benign    runs {len(benign):3d}  false rank-steps {false} of {rank_steps}")
    print(
        f"overhead  hooked/plain per rank {[round(r, 4) for r in ratios]} (ratio of means "
        f"{mean_ratio:.4f}; CPU time of the process {cpu_ratio:.4f}); hooked/allreduce_hook per "
        f"rank {[round(r, 4) for r in wrapped]}; "
        f"plain step {plain_ms:.1f} ms, hook cost {cost_ms:+.2f} ms/step (1.3 M parameters, "
        f"batch {args.overhead_batch}, {args.world} ranks); "
        f"wall {time.perf_counter() - started:.0f} s"
    )
    liar = sum(1 for s in scores["liar"] if s.first_detection is not None and s.first_detection < 3)
    print(
        json.dumps(
            {
                "tpr_scale10": round(tpr("scale"), 4),
                "tpr_signflip": round(tpr("signflip"), 4),
                "tpr_noise": round(tpr("noise"), 4),
                "liar_caught": f"{liar}/{len(scores['liar'])}",
                "fpr_per_rank_step": round(false / rank_steps, 6) if rank_steps else None,
                "overhead_ratio": round(statistics.median(ratios), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
