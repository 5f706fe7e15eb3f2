"""Rules GI-1 to GI-4 over a window of :class:`~.signals.StepSignals`.

* **GI-1** (HIGH): a rank flagged in at least ``min_hits`` of the last ``window_steps`` steps
  (3 of 10), the current one included; flagged = NaN/Inf in its gradient, or ``norm_z >
  norm_z``, or ``cosine_z < -cosine_z`` at this step, or a *persistent* outlier: its log-norm
  above the step median by a mean of more than ``norm_z`` standard errors over the last
  ``L >= min_hits`` steps (any such L in the window; the scale is the MAD of all ranks'
  deviations in the window), or ``cosine < cosine_min`` both at this step and on average over
  the window. The persistent forms catch a rank that stays moderately off (noise a few times
  its gradient) where one step's four-rank MAD cannot, and keep an honest rank whose cosine
  touches 0 once from being flagged.
* **GI-2** (MEDIUM): a rank among the ``f`` worst Krum scores in at least ``min_hits`` of the
  last ``window_steps`` steps (20 of 50), the current one included.
* **GI-3** (CRITICAL): ``relative_error > relative_error`` at the current step (the ranks'
  sketches do not add up to the sketch of the reduced gradient: a rank lied), or a rank's
  reduced sketch differs from the consensus by more than ``relative_error`` (a rank lies
  about what it received: that rank is named). The lying sender is not identifiable from
  the sums alone; the rank the residual points at is named as a *suspect* when ``|cos| >=
  attribution_cosine``.
* **GI-4** (CRITICAL): ranks whose parameter digest differs from the majority's.

Each rule is a :class:`~hpcscope.model.alerts.RuleSpec` (data: ``deploy/rules/``); a rule
missing from the set, or disabled, is not evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hpcscope.analysis.integrity.signals import SignalParameters, StepSignals
from hpcscope.model.alerts import RuleSpec, Severity, Vector
from hpcscope.model.rules import Rule, RuleKind


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that fired at a step.

    Attributes:
        rule_id: ``GI-1``...
        severity: the rule's severity.
        title: the rule's title.
        step: the step it fired at.
        rank: the rank it names, or None (the whole job).
        suspected: the rank is a suspect, not established (GI-3's sender).
        summary: one line with the figures.
        values: the figures by name.
        lines: where the step's records are (``source:line``).
    """

    rule_id: str
    severity: Severity
    title: str
    step: int
    rank: int | None
    summary: str
    suspected: bool = False
    values: Mapping[str, float] = field(default_factory=dict)
    lines: tuple[str, ...] = ()


def signal_parameters(rules: Mapping[str, RuleSpec]) -> SignalParameters:
    """The signal knobs the rules ask for (defaults when a rule is absent)."""
    gi1, gi2 = rules.get("GI-1"), rules.get("GI-2")
    return SignalParameters(
        mad_floor_ratio=gi1.threshold("mad_floor_ratio") if gi1 else 0.1,
        cosine_mad_floor=gi1.threshold("cosine_mad_floor") if gi1 else 0.02,
        krum_f=int(gi2.threshold("f")) if gi2 else 1,
    )


def _log_norm_deviations(signals: StepSignals) -> dict[int, float]:
    """Per rank: log of its norm minus the step's median log norm (finite norms only)."""
    finite = [float(n) for n in signals.norm if np.isfinite(n) and n > 0]
    if not finite:
        return {}
    median = float(np.median(np.log(finite)))
    return {
        rank: float(np.log(n)) - median
        for rank, n in zip(signals.ranks, signals.norm, strict=True)
        if np.isfinite(n) and n > 0
    }


def persistence(window: Sequence[StepSignals], rule: RuleSpec) -> dict[int, tuple[float, float]]:
    """Per rank over ``window`` (oldest first, ending at the current step): the persistent
    norm z (the largest, over suffixes of at least ``min_hits`` steps, of the mean log-norm
    deviation over its standard error) and the mean cosine."""
    deviations = [_log_norm_deviations(s) for s in window]
    pooled = np.array([d for step in deviations for d in step.values()])
    floor = float(np.log1p(rule.threshold("mad_floor_ratio")))
    scale = 1.4826 * max(float(np.median(np.abs(pooled))) if pooled.size else 0.0, floor)
    out: dict[int, tuple[float, float]] = {}
    for i, rank in enumerate(window[-1].ranks):
        series = [step[rank] for step in deviations if rank in step]
        best = 0.0
        for length in range(rule.min_hits, len(series) + 1):
            recent = series[-length:]
            best = max(best, float(np.mean(recent)) / (scale / np.sqrt(length)))
        cosines = [float(s.cosine[s.index(rank)]) for s in window if rank in s.ranks]
        out[rank] = (best, float(np.mean(cosines)) if cosines else float(window[-1].cosine[i]))
    return out


def gi1_flags(
    signals: StepSignals, rule: RuleSpec, window: Sequence[StepSignals] | None = None
) -> dict[int, str]:
    """Ranks GI-1 flags at one step, with the reason (``window``: the steps up to this one,
    for the persistent conditions; None: this step alone)."""
    persistent = persistence(window or [signals], rule)
    deviations = _log_norm_deviations(signals)
    flags: dict[int, str] = {}
    for i, rank in enumerate(signals.ranks):
        reasons = []
        if signals.nonfinite[i] > 0:
            reasons.append(f"{int(signals.nonfinite[i])} NaN/Inf")
        if signals.norm_z[i] > rule.threshold("norm_z"):
            reasons.append(f"norm z {signals.norm_z[i]:.1f}")
        norm_z, mean_cosine = persistent[rank]
        if norm_z > rule.threshold("norm_z") and deviations.get(rank, 0.0) > 0:
            reasons.append(f"persistent norm z {norm_z:.1f}")
        if signals.cosine_z[i] < -rule.threshold("cosine_z"):
            reasons.append(f"cosine z {signals.cosine_z[i]:.1f}")
        floor = rule.threshold("cosine_min")
        if signals.cosine[i] < floor and mean_cosine < floor:
            reasons.append(f"cosine {signals.cosine[i]:.2f} (window mean {mean_cosine:.2f})")
        if reasons:
            flags[rank] = ", ".join(reasons)
    return flags


def gi2_worst(signals: StepSignals, rule: RuleSpec) -> set[int]:
    """Ranks among the ``f`` worst Krum scores at one step (none without Krum scores)."""
    if signals.krum is None:
        return set()
    f = int(rule.threshold("f"))
    order = sorted(range(len(signals.ranks)), key=lambda i: -float(signals.krum[i]))  # type: ignore[index]
    return {signals.ranks[i] for i in order[:f]}


def _windowed(
    history: Sequence[StepSignals], rule: RuleSpec, flagged: dict[int, set[int]]
) -> dict[int, int]:
    """Hits per rank over the rule's window, for ranks flagged at the current step."""
    current = history[-1]
    window = [s for s in history if s.step > current.step - rule.window_steps]
    hits: dict[int, int] = {}
    for rank in flagged.get(current.step, set()):
        hits[rank] = sum(1 for s in window if rank in flagged.get(s.step, set()))
    return hits


def evaluate_step(history: Sequence[StepSignals], rules: Mapping[str, RuleSpec]) -> list[Finding]:
    """Findings at the last step of ``history`` (older steps give the windows).

    Args:
        history: signals of consecutive recent steps, oldest first; at least the longest
            window of the rules is needed for the windowed rules to see all of it.
        rules: rule specs by id (``GI-1``..``GI-4``); disabled ones are skipped.
    """
    if not history:
        return []
    current = history[-1]
    found: list[Finding] = []
    gi1 = rules.get("GI-1")
    if gi1 is not None and gi1.enabled:
        flags_by_step = {
            s.step: gi1_flags(
                s, gi1, [h for h in history[: i + 1] if h.step > s.step - gi1.window_steps]
            )
            for i, s in enumerate(history)
        }
        reasons = flags_by_step[current.step]
        flagged = {step: set(flags) for step, flags in flags_by_step.items()}
        for rank, hits in sorted(_windowed(history, gi1, flagged).items()):
            if hits >= gi1.min_hits:
                i = current.index(rank)
                found.append(
                    Finding(
                        "GI-1", gi1.severity, gi1.title, current.step, rank,
                        f"step {current.step}: rank {rank} {reasons[rank]} "
                        f"({hits} of the last {gi1.window_steps} steps)",
                        values={
                            "norm": float(current.norm[i]),
                            "norm_z": float(current.norm_z[i]),
                            "cosine": float(current.cosine[i]),
                            "cosine_z": float(current.cosine_z[i]),
                            "hits": float(hits),
                        },
                        lines=current.lines,
                    )
                )  # fmt: skip
    gi2 = rules.get("GI-2")
    if gi2 is not None and gi2.enabled and current.krum is not None:
        worst = {s.step: gi2_worst(s, gi2) for s in history}
        for rank, hits in sorted(_windowed(history, gi2, worst).items()):
            if hits >= gi2.min_hits:
                i = current.index(rank)
                found.append(
                    Finding(
                        "GI-2", gi2.severity, gi2.title, current.step, rank,
                        f"step {current.step}: rank {rank} among the {int(gi2.threshold('f'))} "
                        f"worst Krum scores in {hits} of the last {gi2.window_steps} steps",
                        values={"krum": float(current.krum[i]), "hits": float(hits)},
                        lines=current.lines,
                    )
                )  # fmt: skip
    gi3 = rules.get("GI-3")
    if gi3 is not None and gi3.enabled:
        found.extend(_gi3(current, gi3))
    gi4 = rules.get("GI-4")
    if gi4 is not None and gi4.enabled and current.checksum_minority:
        whole_job = set(current.checksum_minority) == set(current.checksum_ranks)
        targets: list[int | None] = [None] if whole_job else list(current.checksum_minority)
        for target in targets:
            who = "no majority among the replicas" if target is None else f"rank {target}'s replica"
            found.append(
                Finding(
                    "GI-4", gi4.severity, gi4.title, current.step, target,
                    f"step {current.step}: parameter checksum disagreement ({who}; "
                    f"{len(current.checksum_ranks)} replicas compared)",
                    lines=current.lines,
                )
            )  # fmt: skip
    return found


def _gi3(current: StepSignals, rule: RuleSpec) -> list[Finding]:
    limit = rule.threshold("relative_error")
    found: list[Finding] = []
    error = current.relative_error
    if error is not None and error > limit:
        cosine = current.suspect_cosine or 0.0
        named = current.suspect if cosine >= rule.threshold("attribution_cosine") else None
        who = (
            f"suspect rank {named} (residual |cos| {cosine:.2f} with its sketch)"
            if named is not None
            else "sender not identifiable from the sums"
        )
        found.append(
            Finding(
                "GI-3", rule.severity, rule.title, current.step, named,
                f"step {current.step}: reported sketches do not add up to the reduced "
                f"gradient (relative error {error:.2e} > {limit:g}); {who}",
                suspected=named is not None,
                values={"relative_error": error, "suspect_cosine": cosine},
                lines=current.lines,
            )
        )  # fmt: skip
    spread = current.reduced_spread
    if spread is not None and spread > limit:
        found.append(
            Finding(
                "GI-3", rule.severity, rule.title, current.step, None,
                f"step {current.step}: ranks disagree on the reduced gradient's sketch "
                f"(spread {spread:.2e} > {limit:g})",
                values={"reduced_spread": spread},
                lines=current.lines,
            )
        )  # fmt: skip
    return found


_GI = Vector.GRADIENT_INJECTION
#: The gradient rules (``deploy/rules/gradient-integrity.yaml``).
RULES: tuple[Rule, ...] = (
    Rule("GI-1", _GI, RuleKind.INTEGRITY, evaluate_step, thresholds=(
        "norm_z", "cosine_z", "cosine_min", "mad_floor_ratio", "cosine_mad_floor")),
    Rule("GI-2", _GI, RuleKind.INTEGRITY, evaluate_step, thresholds=("f",)),
    Rule("GI-3", _GI, RuleKind.INTEGRITY, evaluate_step,
         thresholds=("relative_error", "attribution_cosine")),
    Rule("GI-4", _GI, RuleKind.INTEGRITY, evaluate_step),
)  # fmt: skip
