"""Storage evidence for a straggler from the Lustre job_stats of its node.

The trace says *that* a rank waits for its input
(:mod:`hpcscope.analysis.traces.straggler_evidence`, "data"); Lustre's job_stats say whether the
filesystem is why. Each OSS and MDS counts, per job_stats entry (a job id such as ``<slurm
job>:<uid>:<host>`` on one target), the operations it served with their service times:
``read``/``write`` in microseconds, ``read_bytes``/ ``write_bytes`` in bytes, and the metadata
operations of the MDT. Summed per client host over the profiled window, they give the node's mean
read latency and read throughput; every rank of a node shares that node's client, so the comparison
is node against node: the straggler's node against its peers' (the other ranks' nodes, its own
excluded).

Rules (increases over the window, per entry; resets handled: see :func:`entry_increases`):

* **supports** when the node's mean read latency is at least :data:`LATENCY_RATIO` times the
  median of its peers' nodes *and* at least :data:`LATENCY_MARGIN_SECONDS` above it (the ratio
  alone would flag 0.4 ms against 0.15 ms, which no input pipeline notices); or when data load
  is the rank's slow phase and its node read at most :data:`THROUGHPUT_RATIO` of the peers'
  median read throughput per rank (slow storage hides behind few, not slow, reads when the
  client has a small ``max_rpcs_in_flight``);
* **rules out** otherwise, giving its latency and throughput against its peers';
* when every rank ran on one node there is no peer node: one item (not supporting) says so and
  gives the node's mean read latency; when no peer node has rows, the same;
* nothing is said when the straggler's node has no rows in the window (the caller notes it).

The caller chooses the rows: those of the job under analysis (its ``job_id``) compare the job's
own I/O node against node; all rows of the nodes compare the nodes' storage paths.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from hpcscope.analysis.counters import bracket_reads, counter_increase
from hpcscope.analysis.traces.straggler_evidence import Evidence

#: A mean read latency at least this many times the peers' median supports a storage cause ...
LATENCY_RATIO = 2.0
#: ... when it is also at least this much above it (seconds).
LATENCY_MARGIN_SECONDS = 1e-3
#: Read throughput per rank at most this share of the peers' median, while data load is the
#: rank's slow phase, supports a storage cause.
THROUGHPUT_RATIO = 0.5
#: One job_stats entry's counter of one operation: the unit of increases and resets.
ENTRY = ["server", "target", "job_id_raw", "operation"]
#: Operations that move file data (on an OST, or on an MDT with Data-on-MDT); the MDT's other
#: operations are metadata.
DATA_OPERATIONS = frozenset({"read", "write", "read_bytes", "write_bytes", "punch"})


@dataclass(frozen=True, slots=True)
class NodeStorage:
    """One client host's Lustre I/O over a window, summed over its job_stats entries.

    Attributes:
        host: the client host (from the job id, ``%H`` of ``jobid_name``).
        entries: job_stats entries (server, target, job id) read in the window.
        reads: entry snapshots the figures rest on.
        span_seconds: from the earliest to the latest snapshot counted (from an entry's start
            when its counters are counted from zero).
        read_ops: read RPCs served (``read`` samples).
        read_wait_seconds: their summed service time; None when the format has no sums
            (pre-2.14 ``{ samples: N, unit: reqs }``).
        read_bytes: bytes read (``read_bytes`` sum).
        write_ops / write_wait_seconds / write_bytes: the same for writes.
        metadata_ops: MDT operations other than data (open, close, getattr, ...).
        resets: entries whose counters restarted in the window (dropped after
            ``job_cleanup_interval`` and recreated, or a server restart).
    """

    host: str
    entries: int
    reads: int
    span_seconds: float
    read_ops: float
    read_wait_seconds: float | None
    read_bytes: float
    write_ops: float
    write_wait_seconds: float | None
    write_bytes: float
    metadata_ops: float
    resets: int = 0

    @property
    def mean_read_latency_seconds(self) -> float | None:
        """Mean service time of a read RPC; None without reads or without sums."""
        if self.read_wait_seconds is None or self.read_ops <= 0:
            return None
        return self.read_wait_seconds / self.read_ops

    @property
    def mean_write_latency_seconds(self) -> float | None:
        if self.write_wait_seconds is None or self.write_ops <= 0:
            return None
        return self.write_wait_seconds / self.write_ops

    @property
    def read_bytes_per_second(self) -> float | None:
        return self.read_bytes / self.span_seconds if self.span_seconds > 0 else None


def bracket(rows: pl.DataFrame, start: datetime, end: datetime) -> pl.DataFrame:
    """Each entry's snapshots from its last at or before ``start`` to its first at or after
    ``end`` (its first/last snapshot when there is none): job_stats are read every poll
    interval, so the increase over a window is the increase between the reads around it."""
    return bracket_reads(rows, start, end, by=ENTRY)


def entry_increases(rows: pl.DataFrame, *, since: datetime | None = None) -> pl.DataFrame:
    """The increase of ``samples`` and ``sum_value`` between consecutive snapshots of each
    entry's operation.

    A counter restarted from 0 (Prometheus' ``rate`` convention) when ``samples`` or
    ``sum_value`` went down, or when ``start_ts`` changed (Lustre dropped the idle entry after
    ``job_cleanup_interval`` and a new one began): the increase is then the new value. An
    entry's first snapshot counts from zero when its ``start_ts`` is known and at or after
    ``since`` (always, when ``since`` is None): the entry began with zero counters then.

    Args:
        rows: ``lustre_job_stats`` rows (``ts``, :data:`ENTRY` columns, ``start_ts``,
            ``samples``, ``sum_value`` and any others, which are kept).
        since: the window's start.

    Returns:
        One row per snapshot that counts: the input columns plus ``samples_increase``,
        ``sum_increase`` (null when ``sum_value`` is), ``origin_ts`` (the time the increase
        starts from) and ``reset`` (bool).
    """
    frame = rows.sort([*ENTRY, "ts"])
    prev_samples = pl.col("samples").shift(1).over(ENTRY)
    prev_sum = pl.col("sum_value").shift(1).over(ENTRY)
    prev_start = pl.col("start_ts").shift(1).over(ENTRY)
    prev_ts = pl.col("ts").shift(1).over(ENTRY)
    first = prev_ts.is_null()
    restarted = (
        (pl.col("samples") < prev_samples).fill_null(False)
        | (pl.col("sum_value") < prev_sum).fill_null(False)
        | (pl.col("start_ts") != prev_start).fill_null(False)
    )
    fresh = pl.col("start_ts").is_not_null()
    if since is not None:
        fresh = fresh & (pl.col("start_ts") >= since)
    from_zero = restarted | (first & fresh)
    out = frame.with_columns(
        counter_increase(pl.col("samples"), prev_samples, restarted=from_zero).alias(
            "samples_increase"
        ),
        counter_increase(pl.col("sum_value"), prev_sum, restarted=from_zero).alias("sum_increase"),
        pl.when(first).then(pl.col("start_ts")).otherwise(prev_ts).alias("origin_ts"),
        restarted.alias("reset"),
    )
    return out.filter(~first | (first & fresh))


def node_storage(
    rows: pl.DataFrame, *, window: tuple[datetime, datetime] | None = None
) -> dict[str, NodeStorage]:
    """Summarise ``lustre_job_stats`` rows per client host.

    Args:
        rows: columns ``ts`` (snapshot time), ``server``, ``target``, ``component``
            (``ost``/``mdt``), ``job_id_raw``, ``host`` (nullable: rows without one are not
            placed), ``operation``, ``unit`` (``bytes``/``usecs``/``reqs``), ``samples``,
            ``sum_value`` (nullable), ``start_ts`` (nullable); other columns are ignored.
        window: only the snapshots that bracket it count (see :func:`bracket`); all when None.

    Returns:
        ``{host: NodeStorage}`` for every host with at least one snapshot.
    """
    rows = rows.filter(pl.col("host").is_not_null())
    if window is not None:
        rows = bracket(rows, *window)
    if rows.height == 0:
        return {}
    increases = entry_increases(rows, since=None if window is None else window[0])
    op, component = pl.col("operation"), pl.col("component")
    samples, total = pl.col("samples_increase"), pl.col("sum_increase")
    timed = pl.col("unit") == "usecs"

    def wait(name: str) -> pl.Expr:
        chosen = (op == name) & timed
        known = total.filter(chosen).is_not_null().any()
        return pl.when(known).then(total.filter(chosen).sum() / 1e6).otherwise(None)

    sums = increases.group_by("host").agg(
        samples.filter(op == "read").sum().alias("read_ops"),
        wait("read").alias("read_wait_seconds"),
        total.filter(op == "read_bytes").sum().alias("read_bytes"),
        samples.filter(op == "write").sum().alias("write_ops"),
        wait("write").alias("write_wait_seconds"),
        total.filter(op == "write_bytes").sum().alias("write_bytes"),
        samples.filter((component == "mdt") & ~op.is_in(DATA_OPERATIONS)).sum().alias("meta"),
        pl.struct(ENTRY[:3]).filter(pl.col("reset")).n_unique().alias("resets"),
        pl.col("origin_ts").min().alias("origin"),
    )
    by_host = {row["host"]: row for row in sums.to_dicts()}
    snapshots = rows.group_by("host").agg(
        pl.struct(ENTRY[:3]).n_unique().alias("entries"),
        pl.struct([*ENTRY[:3], "ts"]).n_unique().alias("reads"),
        pl.col("ts").min().alias("first"),
        pl.col("ts").max().alias("last"),
    )
    out: dict[str, NodeStorage] = {}
    for row in snapshots.sort("host").to_dicts():
        host = str(row["host"])
        counted = by_host.get(host, {})
        origin = counted.get("origin") or row["first"]
        span = max(0.0, (row["last"] - min(origin, row["first"])).total_seconds())
        out[host] = NodeStorage(
            host=host,
            entries=int(row["entries"]),
            reads=int(row["reads"]),
            span_seconds=span,
            read_ops=float(counted.get("read_ops") or 0.0),
            read_wait_seconds=_optional(counted.get("read_wait_seconds")),
            read_bytes=float(counted.get("read_bytes") or 0.0),
            write_ops=float(counted.get("write_ops") or 0.0),
            write_wait_seconds=_optional(counted.get("write_wait_seconds")),
            write_bytes=float(counted.get("write_bytes") or 0.0),
            metadata_ops=float(counted.get("meta") or 0.0),
            resets=int(counted.get("resets") or 0),
        )
    return out


def job_throughput(
    rows: pl.DataFrame, start: datetime, end: datetime
) -> dict[str, tuple[float, float]]:
    """Lustre read and write bytes per second of each Slurm job over ``[start, end]``.

    Summed over every entry of the job (each client host, each target); increases between the
    snapshots that bracket the window (see :func:`bracket`, :func:`entry_increases`: resets
    handled), divided by the time from the earliest snapshot counted from to the latest.

    Args:
        rows: ``lustre_job_stats`` rows (``job_id`` nullable: entries of no Slurm job are left
            out), as for :func:`node_storage`.
        start: the window's start (naive UTC).
        end: the window's end.

    Returns:
        ``{job_id: (read_bytes_per_second, write_bytes_per_second)}`` for every job with an
        increase counted over a span longer than zero.
    """
    rows = rows.filter(pl.col("job_id").is_not_null())
    if rows.height == 0:
        return {}
    increases = entry_increases(bracket(rows, start, end), since=start)
    op, total = pl.col("operation"), pl.col("sum_increase")
    sums = increases.group_by("job_id").agg(
        total.filter(op == "read_bytes").sum().alias("read_bytes"),
        total.filter(op == "write_bytes").sum().alias("write_bytes"),
        pl.col("origin_ts").min().alias("origin"),
        pl.col("ts").max().alias("last"),
    )
    out: dict[str, tuple[float, float]] = {}
    for row in sums.sort("job_id").to_dicts():
        if row["origin"] is None:
            continue
        span = (row["last"] - row["origin"]).total_seconds()
        if span > 0:
            out[str(row["job_id"])] = (
                float(row["read_bytes"] or 0.0) / span,
                float(row["write_bytes"] or 0.0) / span,
            )
    return out


def _optional(value: float | None) -> float | None:
    return None if value is None else float(value)


def _ms(seconds: float | None) -> str:
    return "no reads" if seconds is None else f"{seconds * 1000:,.2f} ms"


def _rate(bytes_per_second: float | None) -> str:
    return "unknown" if bytes_per_second is None else f"{bytes_per_second / 1e6:,.1f} MB/s"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def storage_evidence(
    stragglers: Sequence[int],
    rank_nodes: Mapping[int, str],
    storage: Mapping[str, NodeStorage],
    *,
    data_phase_ranks: Collection[int] = (),
) -> dict[int, tuple[Evidence, ...]]:
    """Storage evidence from Lustre job_stats for each straggler.

    Args:
        stragglers: the straggler ranks.
        rank_nodes: the node each analysed rank ran on (ranks that could not be placed are
            absent).
        storage: the hosts' Lustre summaries over the analysed window (:func:`node_storage`).
        data_phase_ranks: stragglers whose slow phase is data load (their throughput counts).

    Returns:
        ``{rank: evidence items}`` (kind ``data``, ``figures["source"] == "lustre"``) for the
        stragglers something can be said about.
    """
    out: dict[int, tuple[Evidence, ...]] = {}
    nodes = set(rank_nodes.values())
    ranks_on = Counter(rank_nodes.values())
    for rank in stragglers:
        node = rank_nodes.get(rank)
        own = None if node is None else storage.get(node)
        if node is None or own is None:
            continue
        latency = own.mean_read_latency_seconds
        figures: dict[str, float | int | str | None] = {
            "node": node,
            "source": "lustre",
            "mean_read_latency_seconds": latency,
            "read_ops": own.read_ops,
            "read_bytes": own.read_bytes,
            "metadata_ops": own.metadata_ops,
            "resets": own.resets,
        }
        peers = [storage[n] for n in sorted(nodes - {node}) if n in storage]
        if not peers:
            why = (
                f"every rank ran on {node}"
                if nodes == {node}
                else f"none of its peers' {len(nodes - {node})} node(s) has Lustre job_stats "
                "in the profiled window"
            )
            out[rank] = (
                Evidence(
                    "data",
                    False,
                    f"Lustre reads cannot be compared node against node: {why}; reads from "
                    f"{node} took {_ms(latency)} on average ({own.read_ops:,.0f} read RPCs, "
                    f"{own.read_bytes / 1e9:,.2f} GB)",
                    figures,
                ),
            )
            continue
        peer_latency = _median([p.mean_read_latency_seconds for p in peers])
        rate = _per_rank(own.read_bytes_per_second, ranks_on[node])
        peer_rate = _median([_per_rank(p.read_bytes_per_second, ranks_on[p.host]) for p in peers])
        figures.update(
            peer_nodes=len(peers),
            peers_mean_read_latency_seconds=peer_latency,
            read_bytes_per_second_per_rank=rate,
            peers_read_bytes_per_second_per_rank=peer_rate,
        )
        slow = (
            latency is not None
            and peer_latency is not None
            and latency >= LATENCY_RATIO * peer_latency
            and latency - peer_latency >= LATENCY_MARGIN_SECONDS
        )
        starved = (
            rank in data_phase_ranks
            and rate is not None
            and peer_rate is not None
            and peer_rate > 0
            and rate <= THROUGHPUT_RATIO * peer_rate
        )
        against = (
            f"{_ms(latency)} per read RPC on {node} against {_ms(peer_latency)} on its peers' "
            f"{len(peers)} node(s) (median)"
        )
        throughput = f"{_rate(rate)} per rank against {_rate(peer_rate)}"
        if slow:
            summary = (
                f"Lustre reads are slow from {node}: {against}, {throughput}: its input "
                "pipeline waits on storage (a busy OST, a congested path to the OSS, or many "
                "small reads)"
            )
        elif starved:
            summary = (
                f"{node} read {throughput} on its peers' nodes from Lustre while data loading "
                f"is this rank's slow phase ({against}): its input pipeline gets less data from "
                "storage"
            )
        else:
            summary = f"Lustre is not it: {against}; reads {throughput} on its peers' nodes"
        out[rank] = (Evidence("data", slow or starved, summary, figures),)
    return out


def _per_rank(bytes_per_second: float | None, ranks: int) -> float | None:
    return None if bytes_per_second is None or ranks <= 0 else bytes_per_second / ranks
