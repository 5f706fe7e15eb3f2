"""Reported versus real GPU efficiency, per GPU and per job. Pure functions over Polars frames.

Definitions (see ``docs/efficiency.md``):

* **reported utilisation**: time-weighted mean of ``reported_util_ratio`` (DCGM_FI_DEV_GPU_UTIL):
  the share of time at least one kernel was resident. A spinning NCCL kernel counts.
* **real efficiency**: time-weighted mean of ``sm_active_ratio`` (DCGM_FI_PROF_SM_ACTIVE): the
  share of SM cycles with a warp resident, averaged over all SMs. Tensor-pipe activity,
  occupancy and DRAM activity are shown beside it as diagnostics.
* **time weights**: each sample stands for the time until the next sample of the same series,
  capped at ``max_interval_seconds`` so that a collection gap is not read as data (the last
  sample of a series gets the series' median interval). A metric missing from a sample (DCP
  fields while a user profiles the GPU, blank sentinels dropped at ingest) is *unknown*: it does
  not weigh in that metric's mean, and it never counts as zero.
* **useful GPU-hours** = Σ (sample interval × SM active) / 3600: the GPU-hours the SMs spent
  computing. Allocated GPU-hours = GPUs × elapsed / 3600, what Slurm, XDMoD and jobstats
  charge. Chargeback of useful GPU-hours rewards efficient jobs instead of occupied ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt
import polars as pl

from hpcscope.analysis.counters import counter_increase

SERIES_KEYS = ["job_id", "node", "gpu", "gpu_instance_id"]

_MEAN_METRICS = {
    "reported_util_ratio": "reported_util_ratio",
    "sm_active_ratio": "sm_active_ratio",
    "tensor_active_ratio": "tensor_active_ratio",
    "sm_occupancy_ratio": "sm_occupancy_ratio",
    "dram_active_ratio": "dram_active_ratio",
    "power_watts": "power_watts",
    "sm_clock_hertz": "sm_clock_hertz",
}

# NVML clock event reasons that mean "the GPU slowed itself down" (not idle, not app clocks).
THROTTLE_SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLE_THERMAL_MASK = 0x20 | 0x40


class GpuVerdict(StrEnum):
    """What one GPU of a job was doing, from its counters and its peers'."""

    HEALTHY = "healthy"
    STRAGGLER = "straggler"
    WAITING_AT_BARRIER = "waiting_at_barrier"
    BUSY_NOT_COMPUTING = "busy_not_computing"
    LOW_EFFICIENCY = "low_efficiency"
    IDLE = "idle"
    XID_ERROR = "xid_error"
    NO_DATA = "no_data"


class JobVerdict(StrEnum):
    """The one-word diagnosis of a job; :func:`job_summary` adds the one-line explanation."""

    HEALTHY = "healthy"
    STRAGGLER = "straggler"
    BUSY_NOT_COMPUTING = "busy_not_computing"
    LOW_EFFICIENCY = "low_efficiency"
    IDLE = "idle"
    PARTIALLY_IDLE = "partially_idle"
    XID_ERROR = "xid_error"
    NO_DATA = "no_data"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Starting values, documented in docs/efficiency.md; tune per site.

    Attributes:
        idle_util_ratio: at or below this reported utilisation (and real efficiency) a GPU is idle.
        busy_util_ratio: at or above this reported utilisation a GPU "looks busy".
        not_computing_sm_ratio: below this real efficiency a busy GPU is "busy, not computing".
        healthy_sm_ratio: at or above this real efficiency a GPU is healthy.
        straggler_excess_ratio: a GPU is a straggler when its SM active exceeds its peers'
            median by this factor ...
        straggler_min_gap_ratio: ... and by at least this absolute amount, while the peers
            look busy (they are waiting at the barrier for it).
    """

    idle_util_ratio: float = 0.05
    busy_util_ratio: float = 0.5
    not_computing_sm_ratio: float = 0.35
    healthy_sm_ratio: float = 0.6
    straggler_excess_ratio: float = 1.2
    straggler_min_gap_ratio: float = 0.1


def with_time_weights(samples: pl.DataFrame, *, max_interval_seconds: float) -> pl.DataFrame:
    """Add ``dt_seconds``: how long each sample stands for (the rule of
    :mod:`hpcscope.model.sampling`).

    The time to the next sample of the same series, clipped to ``max_interval_seconds``: past
    the cap the series has a gap, the sample before it weighs the cap and the rest of the
    silence counts for nothing. A series' last sample weighs its median interval (the cap when
    it is alone). ``store/diagram.py`` ``gpu_time`` applies the same rule in SQL.

    Args:
        samples: columns ``ts`` (datetime), the :data:`SERIES_KEYS` and metric columns.
        max_interval_seconds: cap on one sample's weight
            (:func:`hpcscope.model.sampling.max_sample_weight_seconds`).

    Returns:
        ``samples`` sorted by series and time, with ``dt_seconds`` (f64).
    """
    if samples.height == 0:
        return samples.with_columns(pl.lit(None, dtype=pl.Float64).alias("dt_seconds"))
    ordered = samples.sort([*SERIES_KEYS, "ts"], nulls_last=True)
    gap = (pl.col("ts").shift(-1).over(SERIES_KEYS) - pl.col("ts")).dt.total_microseconds() / 1e6
    ordered = ordered.with_columns(gap.alias("_gap"))
    median = pl.col("_gap").median().over(SERIES_KEYS)
    return ordered.with_columns(
        pl.when(pl.col("_gap").is_null())
        .then(pl.coalesce(median, pl.lit(max_interval_seconds)))
        .otherwise(pl.col("_gap"))
        .clip(0.0, max_interval_seconds)
        .alias("dt_seconds")
    ).drop("_gap")


def _weighted_mean(column: str) -> pl.Expr:
    known = pl.col(column).is_not_null() & pl.col(column).is_not_nan()
    weight = pl.when(known).then(pl.col("dt_seconds")).otherwise(0.0)
    total = weight.sum()
    return (
        pl.when(total > 0)
        .then((pl.col(column).fill_nan(0.0).fill_null(0.0) * weight).sum() / total)
        .otherwise(None)
    )


def gpu_summary(
    samples: pl.DataFrame, *, max_interval_seconds: float, thresholds: Thresholds = Thresholds()
) -> pl.DataFrame:
    """Per job and GPU: reported vs real, useful time, health evidence and a verdict.

    Args:
        samples: ``gpu_samples`` rows (see :data:`hpcscope.model.schemas.GPU_SAMPLE_SCHEMA`).
        max_interval_seconds: the cap of :func:`with_time_weights` (e.g. 3 x scrape interval).

    Returns:
        One row per (``job_id``, ``node``, ``gpu``, ``gpu_instance_id``) with
        ``observed_seconds``, ``reported_util_ratio``, ``sm_active_ratio``,
        ``tensor_active_ratio``, ``sm_occupancy_ratio``, ``dram_active_ratio``,
        ``power_watts``, ``sm_clock_hertz`` (means), ``useful_seconds``, ``energy_joules``,
        ``max_temperature_celsius``, ``throttle_reasons`` (OR of all samples),
        ``slowdown_share`` (share of time with a slowdown reason), ``xid`` (last non-zero),
        ``first_ts``, ``last_ts``, ``verdict`` and ``peer_sm_active_ratio``.
    """
    weighted = with_time_weights(samples, max_interval_seconds=max_interval_seconds)
    if weighted.height == 0:
        return empty_summary()
    slowdown = (pl.col("clock_throttle_reasons").fill_null(0) & THROTTLE_SLOWDOWN_MASK) > 0
    energy = pl.col("energy_joules")
    summary = weighted.group_by(SERIES_KEYS).agg(
        pl.col("dt_seconds").sum().alias("observed_seconds"),
        *[_weighted_mean(source).alias(name) for name, source in _MEAN_METRICS.items()],
        (pl.col("sm_active_ratio").fill_nan(0.0).fill_null(0.0) * pl.col("dt_seconds"))
        .sum()
        .alias("useful_seconds"),
        # a counter since boot: its increase, a reset read as a restart from zero
        counter_increase(energy, energy.shift(1)).sum().alias("energy_joules"),
        pl.col("gpu_temperature_celsius").max().alias("max_temperature_celsius"),
        pl.col("clock_throttle_reasons").fill_null(0).bitwise_or().alias("throttle_reasons"),
        (
            pl.when(slowdown).then(pl.col("dt_seconds")).otherwise(0.0).sum()
            / pl.col("dt_seconds").sum()
        ).alias("slowdown_share"),
        # DCGM reports the *last* Xid until the GPU is reset: only a change seen during the
        # job is the job's Xid (a stale value from a previous job is not)
        pl.col("xid_last")
        .filter(
            (pl.col("xid_last").fill_null(0) != 0)
            & (pl.col("xid_last").fill_null(0) != pl.col("xid_last").shift(1).fill_null(0))
            & pl.col("xid_last").shift(1).is_not_null()
        )
        .last()
        .alias("xid"),
        pl.col("fb_used_bytes").max().alias("max_fb_used_bytes"),
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
    )
    return classify_gpus(summary, thresholds=thresholds)


def empty_summary() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "job_id": pl.String,
            "node": pl.String,
            "gpu": pl.Int16,
            "gpu_instance_id": pl.Int16,
            "observed_seconds": pl.Float64,
            **dict.fromkeys(_MEAN_METRICS, pl.Float64),
            "useful_seconds": pl.Float64,
            "energy_joules": pl.Float64,
            "max_temperature_celsius": pl.Float64,
            "throttle_reasons": pl.Int64,
            "slowdown_share": pl.Float64,
            "xid": pl.Int64,
            "max_fb_used_bytes": pl.Float64,
            "first_ts": pl.Datetime("us"),
            "last_ts": pl.Datetime("us"),
            "peer_sm_active_ratio": pl.Float64,
            "verdict": pl.String,
        }
    )


def _peer_medians(frame: pl.DataFrame, column: str) -> npt.NDArray[np.float64]:
    """Per row, the median of ``column`` over the *other* rows of its job (NaN where there is
    none: no job, no other known value). From each job's values sorted once: the median of
    the others is one or two neighbours of the middle, not a join of every GPU with every
    other (a million rows for a 1,024-GPU job)."""
    values = frame[column].cast(pl.Float64).fill_null(np.nan).to_numpy().copy()
    result = np.full(frame.height, np.nan)
    jobs = frame["job_id"]
    for indices in frame.with_row_index("_i").group_by("job_id").agg("_i")["_i"].to_list():
        rows = np.asarray(indices, dtype=np.int64)
        if jobs[int(rows[0])] is None:
            continue
        own = values[rows]
        known = ~np.isnan(own)
        order = np.argsort(own[known], kind="stable")
        ranked = own[known][order]
        if not ranked.size:
            continue
        position = np.full(rows.size, ranked.size, dtype=np.int64)  # past the end: not removed
        position[np.flatnonzero(known)[order]] = np.arange(ranked.size)
        others = ranked.size - known.astype(np.int64)
        low, high = (others - 1) // 2, others // 2
        # index k of the others is k of the sorted values below the row's own, k + 1 above
        low = low + (low >= position)
        high = high + (high >= position)
        has = others > 0
        pick = np.where(has, low, 0), np.where(has, high, 0)
        # polars' median: the lower middle value plus half the step to the upper one
        below, above = ranked[pick[0]], ranked[pick[1]]
        result[rows] = np.where(has, below + (above - below) * 0.5, np.nan)
    return result


def classify_gpus(summary: pl.DataFrame, *, thresholds: Thresholds = Thresholds()) -> pl.DataFrame:
    """Give each GPU of a job a :class:`GpuVerdict`, comparing it with its peers.

    A straggler is the GPU its peers wait for: its real efficiency stands out *above* the median
    of the other GPUs of the same job (it is still computing) while they look busy (an NCCL
    kernel spins at the barrier). That is the trap of utilisation-only dashboards: the straggler
    looks like the best GPU of the job. GPUs without a job are classified on their own.
    """
    t = thresholds
    frame = summary.with_columns(pl.len().over("job_id").alias("_job_gpus"))
    # the peers of a GPU are the *other* GPUs of its job: median of their real efficiency
    frame = frame.with_columns(
        pl.Series("peer_sm_active_ratio", _peer_medians(frame, "sm_active_ratio")).fill_nan(None),
        pl.Series("_peer_util", _peer_medians(frame, "reported_util_ratio")).fill_nan(None),
    )
    real = pl.col("sm_active_ratio")
    reported = pl.col("reported_util_ratio")
    peer_busy = pl.col("_peer_util") >= t.busy_util_ratio
    is_straggler = (
        pl.col("job_id").is_not_null()
        & (pl.col("_job_gpus") > 1)
        & (real > pl.col("peer_sm_active_ratio") * t.straggler_excess_ratio)
        & (real - pl.col("peer_sm_active_ratio") >= t.straggler_min_gap_ratio)
        & peer_busy
    )
    frame = frame.with_columns(is_straggler.fill_null(False).alias("_straggler"))
    has_straggler = pl.col("_straggler").any().over("job_id")
    verdict = (
        pl.when(pl.col("xid").is_not_null())
        .then(pl.lit(GpuVerdict.XID_ERROR.value))
        .when(real.is_null() & reported.is_null())
        .then(pl.lit(GpuVerdict.NO_DATA.value))
        .when(
            (reported.fill_null(0.0) <= t.idle_util_ratio)
            & (real.fill_null(0.0) <= t.idle_util_ratio)
        )
        .then(pl.lit(GpuVerdict.IDLE.value))
        .when(pl.col("_straggler"))
        .then(pl.lit(GpuVerdict.STRAGGLER.value))
        .when(has_straggler & pl.col("job_id").is_not_null())
        .then(pl.lit(GpuVerdict.WAITING_AT_BARRIER.value))
        .when((reported >= t.busy_util_ratio) & (real < t.not_computing_sm_ratio))
        .then(pl.lit(GpuVerdict.BUSY_NOT_COMPUTING.value))
        .when(real < t.healthy_sm_ratio)
        .then(pl.lit(GpuVerdict.LOW_EFFICIENCY.value))
        .otherwise(pl.lit(GpuVerdict.HEALTHY.value))
    )
    return frame.with_columns(verdict.alias("verdict")).drop(
        "_job_gpus", "_peer_util", "_straggler"
    )
