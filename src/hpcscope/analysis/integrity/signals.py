"""Per-step signals over the ranks of a data-parallel job.

Input: one :class:`~hpcscope.model.integrity.IntegrityRecord` per rank for one step. Output:
:class:`StepSignals`, every number the rules need:

* ``norm_z``: robust z of each rank's gradient norm among the ranks,
  ``(||g_i|| - median) / (1.4826 * MAD)``, with the MAD floored at ``mad_floor_ratio *
  median`` (with four ranks three close norms make the MAD tiny);
* ``cosine``: cosine of each rank's sketch with the mean sketch of the *other* ranks (leave-one-
  out, so a rank scaled x10 cannot pull the mean towards itself); count-sketches preserve
  inner products in expectation (Johnson-Lindenstrauss type), so this estimates the cosine of
  the gradients; ``cosine_z`` its robust z (MAD floored at ``cosine_mad_floor``);
* ``krum``: Krum scores (Blanchard et al., NeurIPS 2017) over the sketches: sum of squared
  distances to the ``n - f - 2`` nearest other sketches; defined only when ``n >= 2f + 3``;
* ``relative_error`` (GI-3): ``||sum_i s_i - n * r|| / sum_i ||s_i||`` where ``s_i`` is rank
  i's reported sketch and ``r`` the sketch of the averaged gradient the witnesses report: per
  bucket and slice the coordinate-wise median of its witnesses' sketches, the slices summed
  (the sketch is linear and DDP averages, so honest reports give 0 up to rounding);
  ``reduced_spread`` how far a witness disagrees with that consensus;
  ``suspect`` the rank whose sketch the residual is most (anti-)aligned with;
* ``checksum_minority`` (GI-4): ranks whose parameter digest differs from the majority's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcscope.model.integrity import FloatArray, IntegrityRecord

IntArray = npt.NDArray[np.int64]

_MAD_SCALE = 1.4826


@dataclass(frozen=True, slots=True)
class SignalParameters:
    """Knobs of the signal computation (from the rules' thresholds)."""

    mad_floor_ratio: float = 0.1
    cosine_mad_floor: float = 0.02
    krum_f: int = 1


@dataclass(frozen=True, slots=True)
class StepSignals:
    """Signals of one step; arrays are indexed like ``ranks``.

    Attributes:
        step: the training step.
        world_size: ranks the job declares.
        ranks: the ranks that reported, ascending.
        norm: each rank's gradient norm.
        nonfinite: each rank's NaN/Inf count.
        norm_z: robust z of the norms.
        cosine: leave-one-out cosine of each rank's sketch.
        cosine_z: robust z of the cosines.
        krum: Krum scores, or None when there are too few ranks.
        relative_error: GI-3 relative error, or None when not every rank reported or no
            witness did.
        suspect: the rank the GI-3 residual points at, with ``suspect_cosine`` (|cos|).
        reduced_spread: max over ranks of ``||r_i - r|| / ||r||`` (a rank misreporting what it
            received), or None.
        checksum_ranks: ranks that reported a parameter digest this step.
        checksum_minority: those whose digest differs from the majority's.
        lines: where each rank's record is (``source:line``), for evidence.
    """

    step: int
    world_size: int
    ranks: tuple[int, ...]
    norm: FloatArray
    nonfinite: IntArray
    norm_z: FloatArray
    cosine: FloatArray
    cosine_z: FloatArray
    krum: FloatArray | None
    relative_error: float | None
    suspect: int | None
    suspect_cosine: float | None
    reduced_spread: float | None
    checksum_ranks: tuple[int, ...]
    checksum_minority: tuple[int, ...]
    lines: tuple[str, ...]

    def index(self, rank: int) -> int:
        """Position of ``rank`` in the arrays."""
        return self.ranks.index(rank)


def robust_z(values: FloatArray, *, mad_floor: float) -> FloatArray:
    """``(x - median) / (1.4826 * max(MAD, mad_floor))``; zeros for fewer than 3 values."""
    if values.size < 3:
        return np.zeros_like(values)
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    scale = _MAD_SCALE * max(mad, mad_floor, 1e-300)
    z: FloatArray = (values - median) / scale
    return z


def _cosine(a: FloatArray, b: FloatArray) -> float:
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator > 0 else 0.0


def leave_one_out_cosines(sketches: FloatArray) -> FloatArray:
    """Cosine of each row with the mean of the other rows."""
    n = sketches.shape[0]
    if n < 2:
        return np.ones(n)
    total = sketches.sum(axis=0)
    return np.array([_cosine(sketches[i], (total - sketches[i]) / (n - 1)) for i in range(n)])


def krum_scores(sketches: FloatArray, *, f: int) -> FloatArray | None:
    """Krum score per row: sum of squared distances to its ``n - f - 2`` nearest other rows;
    None when ``n < 2f + 3`` (Krum's condition)."""
    n = sketches.shape[0]
    if n < 2 * f + 3:
        return None
    squared = np.sum(sketches * sketches, axis=1)
    distances = squared[:, None] + squared[None, :] - 2.0 * sketches @ sketches.T
    np.fill_diagonal(distances, np.inf)
    nearest = np.sort(np.maximum(distances, 0.0), axis=1)[:, : n - f - 2]
    scores: FloatArray = nearest.sum(axis=1)
    return scores


def _checksum_minority(
    records: Sequence[IntegrityRecord],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    reported = [(r.rank, r.param_checksum) for r in records if r.param_checksum is not None]
    if len(reported) < 2:
        return tuple(rank for rank, _ in reported), ()
    counts = Counter(digest for _, digest in reported)
    majority, votes = counts.most_common(1)[0]
    ranks = tuple(rank for rank, _ in reported)
    if len(counts) == 1:
        return ranks, ()
    if votes * 2 <= len(reported):  # no majority: every rank is in question
        return ranks, ranks
    return ranks, tuple(rank for rank, digest in reported if digest != majority)


def step_signals(
    records: Sequence[IntegrityRecord], *, parameters: SignalParameters | None = None
) -> StepSignals:
    """Signals of one step from the ranks' records (one per rank, same step).

    Raises:
        ValueError: no records, records of different steps, or sketches of different sizes.
    """
    params = parameters or SignalParameters()
    if not records:
        raise ValueError("no records for the step")
    ordered = sorted(records, key=lambda r: r.rank)
    step = ordered[0].step
    if any(r.step != step for r in ordered):
        raise ValueError(f"records of several steps: {sorted({r.step for r in ordered})}")
    sketches = np.stack([r.sketch() for r in ordered])
    witnessed = reduced_consensus(ordered)
    norm = np.array([r.norm() for r in ordered], dtype=np.float64)
    finite_norm = np.where(np.isfinite(norm), norm, np.nan)
    median_norm = float(np.nanmedian(finite_norm)) if np.isfinite(finite_norm).any() else 0.0
    norm_z = robust_z(
        np.nan_to_num(norm, nan=np.inf), mad_floor=params.mad_floor_ratio * median_norm
    )
    clean = np.nan_to_num(sketches, nan=0.0, posinf=0.0, neginf=0.0)
    cosine = leave_one_out_cosines(clean)
    cosine_z = robust_z(cosine, mad_floor=params.cosine_mad_floor)
    world = max(r.world_size for r in ordered)
    relative_error: float | None = None
    suspect: int | None = None
    suspect_cosine: float | None = None
    spread: float | None = None
    if witnessed is not None and len(ordered) == world and len({r.rank for r in ordered}) == world:
        consensus, deviation = witnessed
        residual = world * consensus - sketches.sum(axis=0)
        scale = float(np.sum(np.linalg.norm(sketches, axis=1)))
        relative_error = float(np.linalg.norm(residual)) / scale if scale > 0 else 0.0
        if not np.isfinite(relative_error):
            relative_error = float("inf")
        cosines = np.array([abs(_cosine(residual, s)) for s in clean])
        best = int(np.argmax(cosines))
        suspect, suspect_cosine = ordered[best].rank, float(cosines[best])
        consensus_norm = float(np.linalg.norm(consensus))
        if consensus_norm > 0:
            spread = max(deviation.values()) / consensus_norm
    checksum_ranks, minority = _checksum_minority(ordered)
    return StepSignals(
        step=step,
        world_size=world,
        ranks=tuple(r.rank for r in ordered),
        norm=norm,
        nonfinite=np.array([r.nonfinite() for r in ordered], dtype=np.int64),
        norm_z=norm_z,
        cosine=cosine,
        cosine_z=cosine_z,
        krum=krum_scores(clean, f=params.krum_f),
        relative_error=relative_error,
        suspect=suspect,
        suspect_cosine=suspect_cosine,
        reduced_spread=spread,
        checksum_ranks=checksum_ranks,
        checksum_minority=minority,
        lines=tuple(f"{r.source}:{r.line}" for r in ordered),
    )


def reduced_consensus(
    records: Sequence[IntegrityRecord],
) -> tuple[FloatArray, dict[int, float]] | None:
    """The averaged gradient's sketch as the witnesses report it, and each witness's distance
    to it.

    Per bucket and slice (``ReducedSlice``), the coordinate-wise median of the witnesses'
    sketches; a bucket's sketch is the sum of its slices' (the sketch is linear), concatenated
    in bucket order like :meth:`IntegrityRecord.sketch`. A witness's distance is the L2 norm of
    its slices' differences from those medians, all its slices together.

    Returns:
        None when some slice of some bucket has no witness (nothing to check against).

    Raises:
        ValueError: slices of another size than the sketch, or witnesses cutting a bucket
            into different slice counts.
    """
    k = records[0].sketch_dim
    numels: dict[int, int] = {}
    parts: dict[int, dict[int, list[tuple[int, FloatArray]]]] = {}
    cuts: dict[int, int] = {}
    for record in records:
        for bucket in record.buckets:
            numels.setdefault(bucket.index, bucket.numel)
            for part in bucket.reduced:
                if part.sketch.shape != (k,):
                    raise ValueError("sketch and reduced sketch sizes differ")
                if cuts.setdefault(bucket.index, part.of) != part.of:
                    raise ValueError(f"bucket {bucket.index}: witnesses cut it differently")
                by_slice = parts.setdefault(bucket.index, {})
                by_slice.setdefault(part.slice, []).append((record.rank, part.sketch))
    pieces: list[FloatArray] = []
    squared: dict[int, float] = {}
    for index in sorted(numels):
        by_slice = parts.get(index, {})
        if set(by_slice) != set(range(cuts.get(index, 1))):
            return None
        total = np.zeros(k)
        for witnesses in by_slice.values():
            median = np.median(np.stack([sketch for _, sketch in witnesses]), axis=0)
            total += median
            for rank, sketch in witnesses:
                squared[rank] = squared.get(rank, 0.0) + float(np.sum((sketch - median) ** 2))
        pieces.append(total)
    if not pieces:
        return None
    return np.concatenate(pieces), {rank: float(np.sqrt(v)) for rank, v in squared.items()}
