"""GPU sample -> job, from the platform's own records only.

Who held a GPU at an instant is known from two platform sources: the allocations written from
the Slurm prolog/epilog (mapping files, job records) and from the scheduler (slurmrestd
``gres_detail``), and the ``hpc_job`` label dcgm-exporter copies from those same mapping files.
A label emitted by anything a user runs (NCCL Inspector's job id, a training script's own
metrics, a user-run exporter) is **never** used to attribute: a job could claim another job's
GPUs, or hide its own. Such a claim is only compared with the allocation and reported when it
disagrees (``security.md`` §0, G4).

Rules, per sample (ts, node, gpu, gpu_instance_id):

1. every allocation covering the sample (``start_time <= ts`` and ``ts < end_time`` or still
   open) attributes it to its job; a GPU shared by two jobs gives two rows, as dcgm-exporter's
   mapping does;
2. with no covering allocation, the sample's platform label (dcgm-exporter's ``hpc_job``, passed
   as ``platform_job_id``) is used, resolved through the raw-id aliases, unless that job has an
   allocation on this GPU at other times (the sample is then before its prolog or after its
   epilog: not the job's);
3. otherwise the sample has no job (null): after the epilog, nothing is attributed.

A claimed id (``claimed_job_id``, from a user-controlled source) that differs from the result is
listed in the mismatches; it changes nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import polars as pl
import pyarrow as pa

from hpcscope.model.sampling import NO_JOB_LABELS
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA

_KEY = ["node", "gpu", "_instance"]


@dataclass(frozen=True, slots=True)
class Attribution:
    """Attributed samples and the evidence of disagreement.

    Attributes:
        samples: ``GPU_SAMPLE_SCHEMA`` rows; ``job_id`` set by the rules above.
        sources: per output row, how its job was found: ``allocation``, ``platform-label`` or
            null (no job).
        mismatches: rows (ts, node, gpu, gpu_instance_id, claimed_job_id, job_id) where a
            claimed or platform label named another job than the allocation.
    """

    samples: pa.Table
    sources: pa.Array
    mismatches: pa.Table


def attribute_gpu_samples(
    samples: pa.Table,
    allocations: pa.Table,
    *,
    aliases: Mapping[str, str] | None = None,
    platform_job_id: str = "platform_job_id",
    claimed_job_id: str = "claimed_job_id",
) -> Attribution:
    """Attribute GPU samples to jobs (see the module docstring for the rules).

    Args:
        samples: ``GPU_SAMPLE_SCHEMA`` columns (``job_id`` ignored, may be absent), plus
            optionally ``platform_job_id`` (dcgm-exporter's ``hpc_job``) and ``claimed_job_id``
            (a user-controlled claim, only checked).
        allocations: ``job_id, node, gpu, gpu_instance_id, start_time, end_time``.
        aliases: raw Slurm id -> job id, applied to labels and allocations.

    Returns:
        :class:`Attribution`.
    """
    resolve = dict(aliases or {})
    frame = cast(pl.DataFrame, pl.from_arrow(samples)).with_row_index("_row")
    for column in (platform_job_id, claimed_job_id):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(column))
    frame = frame.with_columns(
        pl.col("gpu_instance_id").fill_null(-1).cast(pl.Int32).alias("_instance"),
        _resolve(pl.col(platform_job_id), resolve).alias("_platform"),
        _resolve(pl.col(claimed_job_id), resolve).alias("_claimed"),
        pl.col("ts").cast(pl.Datetime("us")),
    )
    alloc = cast(pl.DataFrame, pl.from_arrow(allocations)).select(
        _resolve(pl.col("job_id").cast(pl.String), resolve).alias("_alloc_job"),
        pl.col("node").cast(pl.String),
        pl.col("gpu").cast(pl.Int16),
        pl.col("gpu_instance_id").fill_null(-1).cast(pl.Int32).alias("_instance"),
        pl.col("start_time").cast(pl.Datetime("us")).alias("_start"),
        pl.col("end_time").cast(pl.Datetime("us")).alias("_end"),
    )
    matched = (
        frame.select("_row", "ts", *_KEY)
        .join(alloc, on=_KEY, how="inner")
        .filter(
            (pl.col("_start") <= pl.col("ts"))
            & (pl.col("_end").is_null() | (pl.col("ts") < pl.col("_end")))
        )
        .select("_row", "_alloc_job")
        .unique()
    )
    covered = matched.select("_row").unique().with_columns(pl.lit(True).alias("_covered"))
    # a label whose job has an allocation on this GPU, just not at this instant (before its
    # prolog, after its epilog), is not a fallback: the records are more precise than a label
    known = (
        alloc.select(pl.col("_alloc_job").alias("_platform"), *_KEY)
        .unique()
        .with_columns(pl.lit(True).alias("_known"))
    )
    joined = (
        frame.join(matched, on="_row", how="left")
        .join(covered, on="_row", how="left")
        .join(known, on=["_platform", *_KEY], how="left")
        .with_columns(pl.col("_covered").fill_null(False), pl.col("_known").fill_null(False))
    )
    fallback = ~pl.col("_covered") & pl.col("_platform").is_not_null() & ~pl.col("_known")
    joined = joined.with_columns(
        pl.when(pl.col("_covered"))
        .then(pl.col("_alloc_job"))
        .when(fallback)
        .then(pl.col("_platform"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("job_id"),
        pl.when(pl.col("_covered"))
        .then(pl.lit("allocation"))
        .when(fallback)
        .then(pl.lit("platform-label"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("_source"),
    ).sort("_row", "job_id", nulls_last=True)
    # a label disagrees when it names a job the allocations of that instant do not
    jobs_per_row = joined.group_by("_row").agg(pl.col("job_id").drop_nulls().alias("_jobs"))
    checks = (
        frame.select("_row", "ts", "node", "gpu", "gpu_instance_id", "_platform", "_claimed")
        .join(jobs_per_row, on="_row", how="left")
        .with_columns(pl.col("_jobs").fill_null([]))
    )
    mismatches = pl.concat(
        [
            checks.filter(
                pl.col(label).is_not_null() & ~pl.col("_jobs").list.contains(pl.col(label))
            ).select(
                "ts",
                "node",
                "gpu",
                "gpu_instance_id",
                pl.col(label).alias("claimed_job_id"),
                pl.col("_jobs").list.join(",").alias("job_id"),
                pl.lit(kind).alias("claim_source"),
            )
            for label, kind in (("_platform", "platform-label"), ("_claimed", "self-reported"))
        ]
    )
    columns = [name for name in GPU_SAMPLE_SCHEMA.names if name in joined.columns]
    out = joined.select(columns).to_arrow()
    missing = [f for f in GPU_SAMPLE_SCHEMA if f.name not in out.column_names]
    for missing_field in missing:
        out = out.append_column(missing_field, pa.nulls(out.num_rows, missing_field.type))
    out = out.select(GPU_SAMPLE_SCHEMA.names).cast(GPU_SAMPLE_SCHEMA)
    return Attribution(
        samples=out,
        sources=joined.get_column("_source").to_arrow(),
        mismatches=mismatches.to_arrow(),
    )


def _resolve(expr: pl.Expr, aliases: Mapping[str, str]) -> pl.Expr:
    """Map raw ids to job ids; the no-job labels (``""`` and ``"0"``, see
    :data:`hpcscope.model.sampling.NO_JOB_LABELS`) become null."""
    cleaned = pl.when(expr.is_in(sorted(NO_JOB_LABELS))).then(None).otherwise(expr)
    if not aliases:
        return cleaned
    return cleaned.replace(dict(aliases))
