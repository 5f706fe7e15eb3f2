"""W-4 and DP-5 over the training recorder's events (``model/training_events.py``). Pure.

========  ==============================================================================
W-4       a ``torch.load`` with ``weights_only=False`` (the pickle runs code) of a file not
          produced by the loading job's account: the producer is the account of the job
          whose Lustre changelog ``CREAT`` made the path; without a changelog record, the
          file's owner when it is the job's user; a file of unknown producer fires too
          (MEDIUM). Accounts on ``trusted_accounts`` (a model registry's service account)
          are producers every job may load from.
DP-5      in one job, a data shard whose mean loss is a robust outlier among the shards of
          a window (``|loss - median| / (1.4826 MAD) > robust_z``, at least ``min_shards``
          shards in the window) in ``min_windows`` windows or more: poisoned or mislabelled
          data trains differently (LOW, never pages: the reference calls it noisy)
========  ==============================================================================

Each rank writes its own windows; a window's shard loss is the batch-weighted mean over the
ranks that saw the shard. The job, user and account are the platform's (the caller re-derives
them from the allocations), never the process' claims.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Vector
from hpcscope.model.rules import Rule, RuleKind
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.model.training_events import TrainingEvent


@dataclass(frozen=True, slots=True)
class Placed:
    """An event with the platform's job for its node and GPU at its time."""

    event: TrainingEvent
    job_id: str | None
    user: str | None
    account: str | None


@dataclass(frozen=True, slots=True)
class Producer:
    """Who made a path: the job of its changelog ``CREAT`` record and that job's account."""

    job_id: str | None
    account: str | None


def _alert(spec: RuleSpec, placed: Sequence[Placed], subject: str, summary: str) -> Alert:
    head = placed[0]
    lines = [
        Evidence(
            f"rank {p.event.rank} pid {p.event.pid}: {p.event.kind}",
            source=p.event.source,
            position=f"line {p.event.line}",
            link=f"file://{p.event.source}#L{p.event.line}",
        )
        for p in placed[:4]
    ]
    return Alert(
        rule_id=spec.rule_id,
        vector=Vector(spec.vector),
        severity=spec.severity,
        title=spec.title,
        first_seen=from_epoch_seconds(min(p.event.ts for p in placed)),
        last_seen=from_epoch_seconds(max(p.event.ts for p in placed)),
        node=head.event.node,
        job_id=head.job_id,
        user=head.user,
        account=head.account,
        gpu=head.event.gpu,
        subject=subject,
        evidence=(Evidence(summary, source="training events"), *lines),
    )


def w4_unsafe_loads(
    spec: RuleSpec, loads: Iterable[Placed], producers: Mapping[str, Producer]
) -> list[Alert]:
    """W-4 (module docstring): one alert per job and path."""
    trusted = set(spec.items("trusted_accounts"))
    grouped: dict[tuple[str | None, str], list[Placed]] = {}
    for placed in loads:
        event = placed.event
        if event.kind != "load" or event.weights_only or event.path is None:
            continue
        grouped.setdefault((placed.job_id, event.path), []).append(placed)
    out: list[Alert] = []
    for (_, path), group in sorted(grouped.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        head = group[0]
        producer = producers.get(path)
        if producer is not None and producer.account is not None:
            if producer.account == head.account or producer.account in trusted:
                continue
            made = f"made by job {producer.job_id} of account {producer.account}"
        elif head.event.owner is not None and head.event.owner == head.user:
            continue  # no changelog record; the job's own user owns the file
        else:
            owner = head.event.owner or "unknown"
            made = f"no changelog record of who made it; file owner {owner}"
        out.append(
            _alert(
                spec,
                group,
                path,
                f"job {head.job_id} (account {head.account}) loaded {path} with "
                f"weights_only=False ({len(group)} time(s)): {made}",
            )
        )
    return out


def _robust_z(values: Mapping[str, float]) -> dict[str, float]:
    ordered = sorted(values.values())
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    deviations = sorted(abs(v - median) for v in ordered)
    mad = deviations[mid] if len(deviations) % 2 else (deviations[mid - 1] + deviations[mid]) / 2
    sigma = 1.4826 * mad
    return {
        shard: (abs(v - median) / sigma if sigma > 0 else (math.inf if v != median else 0.0))
        for shard, v in values.items()
    }


def dp5_shard_outliers(spec: RuleSpec, windows: Iterable[Placed]) -> list[Alert]:
    """DP-5 (module docstring): one alert per job and shard."""
    limit = spec.threshold("robust_z")
    min_windows = spec.threshold("min_windows")
    min_shards = spec.threshold("min_shards")
    by_window: dict[tuple[str | None, int], list[Placed]] = {}
    for placed in windows:
        if placed.event.kind == "shard_loss" and placed.event.window is not None:
            by_window.setdefault((placed.job_id, placed.event.window), []).append(placed)
    flagged: dict[tuple[str | None, str], list[tuple[int, float, float, list[Placed]]]] = {}
    for (job, window), group in sorted(by_window.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        sums: dict[str, list[float]] = {}
        for placed in group:
            for shard, (loss, batches) in placed.event.shards.items():
                acc = sums.setdefault(shard, [0.0, 0.0])
                acc[0] += loss * batches
                acc[1] += batches
        means = {shard: total / count for shard, (total, count) in sums.items()}
        if len(means) < min_shards:
            continue
        for shard, z in _robust_z(means).items():
            if z > limit:
                flagged.setdefault((job, shard), []).append((window, z, means[shard], group))
    out: list[Alert] = []
    for (job, shard), hits in sorted(flagged.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if len(hits) < min_windows:
            continue
        seen = [p for _, _, _, group in hits for p in group]
        worst = max(hits, key=lambda h: h[1])
        windows_text = ", ".join(str(h[0]) for h in hits)
        out.append(
            _alert(
                spec,
                seen,
                f"shard {shard}",
                f"shard {shard} of job {job}: mean loss a robust outlier in {len(hits)} windows "
                f"({windows_text}; worst z {worst[1]:.1f} at loss {worst[2]:.4g}; threshold "
                f"z > {limit:g} in {min_windows:g} windows)",
            )
        )
    return out


def training_alerts(
    events: Sequence[Placed], producers: Mapping[str, Producer], rules: Mapping[str, RuleSpec]
) -> list[Alert]:
    """Every enabled training-event rule (W-4, DP-5)."""
    out: list[Alert] = []
    spec = rules.get("W-4")
    if spec is not None and spec.enabled:
        out += w4_unsafe_loads(spec, events, producers)
    spec = rules.get("DP-5")
    if spec is not None and spec.enabled:
        out += dp5_shard_outliers(spec, events)
    return out


#: The training-event rules (``deploy/rules/training-events.yaml``).
RULES: tuple[Rule, ...] = (
    Rule("W-4", Vector.DATA_POISONING, RuleKind.INTEGRITY, training_alerts,
         lists=("trusted_accounts",)),
    Rule("DP-5", Vector.DATA_POISONING, RuleKind.INTEGRITY, training_alerts,
         thresholds=("robust_z", "min_windows", "min_shards")),
)  # fmt: skip
