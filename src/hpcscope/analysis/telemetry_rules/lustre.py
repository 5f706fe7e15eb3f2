"""DP-1, DP-2, DP-4: Lustre changelog records and ``job_stats`` (``security.md`` §2), and the
nodes' Lustre traffic the InfiniBand model subtracts (LNet shares the HCA).

Registered datasets are the DP-1 rule's ``datasets`` list, one item per read-only dataset:
``"<root path> <owner account> <OST targets, comma separated>"``. DP-2 and DP-4 read the same
registry.

========  ==============================================================================
DP-1      a changelog write-type record (``write_types``: CREAT, UNLNK, RENME, RNMTO, TRUNC,
          SATTR, XATTR, MTIME, LYOUT...) under a dataset root by a job that is not a
          curation job of the owner (owner account and a ``curation_partitions``
          partition), or by a uid not in ``steward_uids``; HIGH, CRITICAL when a training
          job (``training_partitions``) read the dataset's targets within
          ``reading_window_seconds``
DP-2      any write-type record on a dataset's manifest (``manifest_names``): CRITICAL
DP-4      a training job with ``write_bytes`` on a dataset's OST targets (job_stats): MEDIUM
========  ==============================================================================

Not here: DP-2's sampled shard hashes, DP-3 (posture of how a dataset was built) and DP-5
(per-shard loss), which need data hpcscope does not collect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.counters import counter_increase
from hpcscope.analysis.telemetry_rules.common import (
    JobSpan,
    enabled,
    megabytes,
    merge,
    telemetry_alert,
)
from hpcscope.analysis.telemetry_rules.residual import LustreInterval
from hpcscope.model.alerts import Alert, RuleSpec, Severity

_SERIES = ["server", "target", "job_id_raw", "operation"]


@dataclass(frozen=True, slots=True)
class Dataset:
    """A registered read-only dataset."""

    root: str
    owner_account: str
    targets: tuple[str, ...]

    def holds(self, path: str | None) -> bool:
        if not path:
            return False
        root = self.root.rstrip("/")
        return path == root or path.startswith(root + "/")


def parse_datasets(items: Sequence[str]) -> tuple[Dataset, ...]:
    """Datasets written ``"<root> <owner account> <target,target...>"``.

    Raises:
        ValueError: an item without three fields or a root that is not absolute.
    """
    found: list[Dataset] = []
    for item in items:
        parts = item.split()
        if len(parts) != 3 or not parts[0].startswith("/"):
            raise ValueError(f"dataset {item!r}: want '<absolute root> <account> <targets>'")
        found.append(Dataset(parts[0], parts[1], tuple(t for t in parts[2].split(",") if t)))
    return tuple(found)


def job_stats_increases(job_stats: pl.DataFrame, operations: Sequence[str]) -> pl.DataFrame:
    """Per-snapshot increases of byte counters of ``job_stats`` rows.

    Returns:
        ``server, target, job_id, host, operation, start, ts, bytes`` where ``start`` is the
        previous snapshot (or the entry's ``start_ts`` for its first one: counters start at
        0 then) and ``bytes`` the increase since (across a restart of the entry: the new
        value, :func:`~hpcscope.analysis.counters.counter_increase`).
    """
    if job_stats.height == 0:
        frame = job_stats
    else:
        frame = job_stats.filter(pl.col("operation").is_in(list(operations))).sort([*_SERIES, "ts"])
    if frame.height == 0:
        return pl.DataFrame(
            schema={"server": pl.String, "target": pl.String, "job_id": pl.String,
                    "host": pl.String, "operation": pl.String, "start": pl.Datetime("us"),
                    "ts": pl.Datetime("us"), "bytes": pl.Float64}
        )  # fmt: skip
    value = pl.col("sum_value").fill_null(0.0)
    previous = value.shift(1).over(_SERIES)
    restarted = pl.col("start_ts").shift(1).over(_SERIES) != pl.col("start_ts")
    first = previous.is_null()
    start = pl.when(first).then(pl.col("start_ts")).otherwise(pl.col("ts").shift(1).over(_SERIES))
    increase = (
        pl.when(first).then(value).otherwise(counter_increase(value, previous, restarted=restarted))
    )
    return (
        frame.with_columns(start.alias("start"), increase.alias("bytes"))
        .filter(pl.col("start").is_not_null() & (pl.col("ts") > pl.col("start")))
        .select("server", "target", "job_id", "host", "operation", "start", "ts", "bytes")
    )


def node_lustre_rates(
    job_stats: pl.DataFrame, jobs: Mapping[str, JobSpan]
) -> dict[str, list[LustreInterval]]:
    """Node -> its Lustre traffic between snapshots (bytes per second each way): a row naming
    its client host (``jobid_name`` with ``%H``) goes to that node, one without is split evenly
    over the job's nodes."""
    out: dict[str, list[LustreInterval]] = {}
    rows = job_stats_increases(job_stats, ("read_bytes", "write_bytes"))
    for row in rows.iter_rows(named=True):
        seconds = (row["ts"] - row["start"]).total_seconds()
        job = jobs.get(str(row["job_id"])) if row["job_id"] is not None else None
        if row["host"]:
            nodes: Sequence[str] = (str(row["host"]),)
        elif job is not None and job.nodes:
            nodes = job.nodes
        else:
            continue
        rate = float(row["bytes"]) / seconds / len(nodes)
        read = rate if row["operation"] == "read_bytes" else 0.0
        write = rate if row["operation"] == "write_bytes" else 0.0
        for node in nodes:
            out.setdefault(node, []).append(LustreInterval(row["start"], row["ts"], read, write))
    return out


def _node_of(job: JobSpan | None, host: str | None) -> str | None:
    if host:
        return host
    if job is not None and len(job.nodes) == 1:
        return job.nodes[0]
    return None


def _training(job: JobSpan | None, partitions: set[str]) -> bool:
    return job is not None and bool({job.partition, job.qos} & partitions)


def changelog_alerts(
    changelog: pl.DataFrame,
    jobs: Mapping[str, JobSpan],
    *,
    dp1: RuleSpec | None,
    dp2: RuleSpec | None,
    datasets: Sequence[Dataset],
    reads: pl.DataFrame,
) -> list[Alert]:
    """DP-1 and DP-2 over changelog rows (``ts, mdt, record_index, record_type, name,
    path, job_id, host, uid``), with ``reads``: :func:`job_stats_increases` of read_bytes."""
    out: list[Alert] = []
    spec = dp1 or dp2
    if spec is None or changelog.height == 0:
        return out
    write_types = set(spec.items("write_types"))
    stewards = set(dp1.items("steward_uids")) if dp1 is not None else set()
    curation = set(dp1.items("curation_partitions")) if dp1 is not None else set()
    training = set(dp1.items("training_partitions")) if dp1 is not None else set()
    window = timedelta(seconds=dp1.threshold("reading_window_seconds")) if dp1 else timedelta()
    manifests = set(dp2.items("manifest_names")) if dp2 is not None else set()
    for row in changelog.sort("ts", "record_index").iter_rows(named=True):
        if row["record_type"] not in write_types:
            continue
        path = row["path"]
        dataset = next((d for d in datasets if d.holds(path)), None)
        if dataset is None:
            continue
        job_id = row["job_id"]
        job = jobs.get(str(job_id)) if job_id is not None else None
        node = _node_of(job, row["host"])
        uid = row["uid"]
        actor = f"job {job_id} ({job.user}, account {job.account})" if job else (
            f"uid {uid} (jobid {row['job_id_raw'] or 'none'}, no Slurm job)"
        )  # fmt: skip
        record = f"{row['mdt']} record {row['record_index']}"
        ts: datetime = row["ts"]
        name = str(path).rsplit("/", 1)[-1]
        if dp2 is not None and name in manifests:
            out.append(
                telemetry_alert(
                    dp2, first_seen=ts, last_seen=ts, node=node,
                    job=job, gpu=None, subject=dataset.root,
                    summary=f"{row['record_type']} of the manifest {path} by {actor}",
                    source="lustre_changelog", position=record,
                )
            )  # fmt: skip
            if job is None:
                out[-1] = _with_user(out[-1], f"uid {uid}")
        if dp1 is None:
            continue
        curating = (
            job is not None
            and job.account == dataset.owner_account
            and (bool({job.partition, job.qos} & curation))
        )
        if curating or (uid is not None and str(uid) in stewards):
            continue
        readers = sorted(
            {
                str(r["job_id"])
                for r in reads.iter_rows(named=True)
                if r["target"] in dataset.targets
                and r["job_id"] is not None
                and r["job_id"] != job_id
                and _training(jobs.get(str(r["job_id"])), training)
                and r["bytes"] > 0
                and abs((r["ts"] - ts).total_seconds()) <= window.total_seconds()
            }
        )
        alert = telemetry_alert(
            dp1,
            first_seen=ts,
            last_seen=ts,
            node=node,
            job=job,
            gpu=None,
            subject=dataset.root,
            severity=Severity.CRITICAL if readers else None,
            summary=(
                f"{row['record_type']} {path} by {actor}: not a curation job of "
                f"{dataset.owner_account}"
                + (f"; training jobs reading the dataset: {', '.join(readers)}" if readers else "")
            ),
            source="lustre_changelog",
            position=record,
        )
        out.append(alert if job is not None else _with_user(alert, f"uid {uid}"))
    return out


def _with_user(alert: Alert, user: str) -> Alert:
    return replace(alert, user=user)


def dp4_training_writes(
    spec: RuleSpec,
    writes: pl.DataFrame,
    jobs: Mapping[str, JobSpan],
    datasets: Sequence[Dataset],
) -> list[Alert]:
    """DP-4 (MEDIUM): a training job wrote to a dataset's OST targets (job_stats)."""
    training = set(spec.items("training_partitions"))
    out: list[Alert] = []
    for row in writes.iter_rows(named=True):
        job = jobs.get(str(row["job_id"])) if row["job_id"] is not None else None
        if not _training(job, training) or row["bytes"] <= 0:
            continue
        dataset = next((d for d in datasets if row["target"] in d.targets), None)
        if dataset is None:
            continue
        out.append(
            telemetry_alert(
                spec,
                first_seen=row["start"],
                last_seen=row["ts"],
                node=_node_of(job, row["host"]),
                job=job,
                gpu=None,
                subject=f"{dataset.root} {row['target']}",
                summary=(
                    f"training job {row['job_id']} (partition {job.partition if job else '?'}) "
                    f"wrote {megabytes(float(row['bytes']))} to {row['target']}, a target of "
                    f"the read-only dataset {dataset.root}"
                ),
                source="lustre_job_stats",
                position=f"{row['server']} {row['target']} {row['ts'].isoformat()}Z",
            )
        )
    return out


def lustre_alerts(
    changelog: pl.DataFrame,
    job_stats: pl.DataFrame,
    jobs: Mapping[str, JobSpan],
    *,
    rules: Mapping[str, RuleSpec],
) -> list[Alert]:
    """Every enabled DP rule. The datasets are DP-1's ``datasets`` list (DP-2 and DP-4 read
    the same registry even when DP-1 itself is disabled)."""
    registry = rules.get("DP-1")
    datasets = parse_datasets(registry.items("datasets")) if registry is not None else ()
    if not datasets:
        return []
    reads = job_stats_increases(job_stats, ("read_bytes",))
    out = changelog_alerts(
        changelog,
        jobs,
        dp1=enabled(rules, "DP-1"),
        dp2=enabled(rules, "DP-2"),
        datasets=datasets,
        reads=reads,
    )
    if (spec := enabled(rules, "DP-4")) is not None:
        out += dp4_training_writes(
            spec, job_stats_increases(job_stats, ("write_bytes",)), jobs, datasets
        )
    return merge(out)
