"""Per-node InfiniBand traffic, and its residual against the traffic the node's job explains.

Expected-traffic model (``security.md`` §3): a node's observed bytes per second ``O(t)`` (sum
over its ports, from the counters' increase across resets) is explained by

    E(t) = k · C(t) + L(t) + background

* ``C(t)`` is the job's collective traffic: in a data-parallel job every node's ring or tree
  AllReduce moves the same bytes, so ``C(t)`` is the median over the job's nodes of
  ``O − L − background`` at the same scrape (a single-node job has no inter-node collective:
  ``C = 1`` and ``k`` is its calibrated rate);
* ``k`` is calibrated per node in the job's first ``calibration_seconds`` (``k = Σ(O − L − bg)
  / Σ C``), never taken from the analytic ring constant ``2(n−1)/n · S``: it absorbs protocol
  overhead, the node's rail share and, for pipeline or tensor parallel jobs, its asymmetry;
* ``L(t)`` is the node's Lustre traffic over LNet when storage shares the HCA (job_stats
  ``read_bytes`` arrive as receive, ``write_bytes`` leave as transmit);
* ``background`` is subnet management and keep-alives of an idle port.

The residual is ``R(t) = O(t) − E(t)``, its noise ``σ_R`` the robust deviation (1.4826 MAD) of
``R`` over the calibration window. Nodes are assumed held by one job at a time (exclusive
nodes, ``security.md`` G5); on a node shared by two jobs the first job by id explains it.
Limit: traffic present from the job's first scrape is learned as the job's own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    JobSpan,
    first_running,
    jobs_by_node,
    median,
    robust_sigma,
)
from hpcscope.model.timeutil import as_naive_utc, epoch_seconds

TX = "port_data_transmitted_bytes_per_second"
RX = "port_data_received_bytes_per_second"


@dataclass(frozen=True, slots=True)
class NodePoint:
    """One scrape interval of one node: bytes per second summed over its ports.

    ``top_tx`` / ``top_rx`` name the port (device, port) that carried the most of each way.
    """

    ts: datetime
    interval_seconds: float
    tx: float
    rx: float
    top_tx: tuple[str, int]
    top_rx: tuple[str, int]


def node_series(rates: pl.DataFrame) -> dict[str, list[NodePoint]]:
    """Node -> its intervals, oldest first, from :func:`hpcscope.analysis.infiniband.port_rates`
    output (``node, device, port, ts, interval_seconds`` and the data rates). Intervals whose
    data rate is unknown (a saturated narrow counter) are left out."""
    return series_of(node_intervals(rates))


#: The columns of :func:`node_intervals`, one row per node and interval.
INTERVAL_COLUMNS = (
    "node", "ts", "interval", "tx", "rx", "tx_device", "tx_port", "rx_device", "rx_port",
)  # fmt: skip


def node_intervals(rates: pl.DataFrame) -> pl.DataFrame:
    """:func:`node_series` as a frame (:data:`INTERVAL_COLUMNS`, by node and time): what the
    service keeps between runs (columns, not a Python object per interval: objects kept
    among each run's garbage held the heap's pages, ``docs/benchmarks.md``)."""
    if rates.height == 0:
        return pl.DataFrame()
    # one group per (node, scrape) in Polars, Python only for the points: a loop over every
    # port row took seconds per evaluation at 128 nodes and an hour of reads
    known = pl.col(TX).is_not_null() & pl.col(RX).is_not_null()

    def top(rate: str, key: str) -> pl.Expr:
        # the port with the highest rate, ties to the highest device name then lowest port
        order = pl.col(key).sort_by([rate, "device", "port"], descending=[True, True, False])
        return order.first()

    return (
        rates.group_by("node", "ts")
        .agg(
            pl.len().alias("ports"),
            known.sum().alias("known"),
            pl.col("interval_seconds").max().alias("interval"),
            pl.col(TX).sum().alias("tx"),
            pl.col(RX).sum().alias("rx"),
            top(TX, "device").alias("tx_device"),
            top(TX, "port").alias("tx_port"),
            top(RX, "device").alias("rx_device"),
            top(RX, "port").alias("rx_port"),
        )
        .filter(pl.col("known") == pl.col("ports"))
        .sort("node", "ts")
        .select(INTERVAL_COLUMNS)
    )


def series_of(intervals: pl.DataFrame) -> dict[str, list[NodePoint]]:
    """Node -> its :class:`NodePoint` list, from :func:`node_intervals` rows (by node, time)."""
    out: dict[str, list[NodePoint]] = {}
    if intervals.height == 0:
        return out
    ports: dict[tuple[str, int], tuple[str, int]] = {}  # one tuple per port name
    for node, ts, interval, tx, rx, tx_dev, tx_port, rx_dev, rx_port in intervals.select(
        INTERVAL_COLUMNS
    ).iter_rows():
        top_tx = (str(tx_dev), int(tx_port))
        top_rx = (str(rx_dev), int(rx_port))
        out.setdefault(str(node), []).append(
            NodePoint(
                ts=ts,
                interval_seconds=float(interval),
                tx=float(tx),
                rx=float(rx),
                top_tx=ports.setdefault(top_tx, top_tx),
                top_rx=ports.setdefault(top_rx, top_rx),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class LustreInterval:
    """A node's Lustre traffic between two job_stats snapshots (bytes per second)."""

    start: datetime
    end: datetime
    read_bytes_per_second: float
    write_bytes_per_second: float


LustreRates = Mapping[str, Sequence[LustreInterval]]
"""Node -> its Lustre intervals (``telemetry_rules.lustre.node_lustre_rates``)."""


def lustre_at(intervals: Sequence[LustreInterval], ts: datetime) -> tuple[float, float]:
    """(receive, transmit) LNet bytes per second of a node at ``ts``: its job_stats reads
    arrive, its writes leave."""
    rx = tx = 0.0
    for item in intervals:
        if item.start < ts <= item.end:
            rx += item.read_bytes_per_second
            tx += item.write_bytes_per_second
    return rx, tx


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def _micros(moment: datetime) -> int:
    """Microseconds since the epoch of a naive UTC time (an aware one is converted)."""
    return (
        (as_naive_utc(moment) - _EPOCH) // _MICROSECOND
        if moment.tzinfo
        else (moment - _EPOCH) // _MICROSECOND
    )


class LustreAt:
    """:func:`lustre_at` over one node's intervals, by bisection: the rules ask it for every
    interval of the node (an hour of them), and a scan of the node's every job_stats interval
    per question was a quarter of a run at 128 nodes. Intervals are bisected by start within
    the longest of the usual ones (up to 4x the median length); the few longer ones (a job's
    first snapshot counts from the job's start) are checked each time. The index is two NumPy
    arrays (16 bytes per interval, no Python object per interval: tuples per interval were
    ~90 MiB per run at 128 nodes and fragmented the heap), and the sums run in the intervals'
    own order, so the figures are :func:`lustre_at`'s to the bit."""

    def __init__(self, intervals: Sequence[LustreInterval]) -> None:
        self._intervals = intervals
        count = len(intervals)
        starts = np.fromiter((_micros(i.start) for i in intervals), dtype=np.int64, count=count)
        lengths = (
            np.fromiter((_micros(i.end) for i in intervals), dtype=np.int64, count=count) - starts
        )
        usual = int(np.median(lengths)) * 4 if count else 0
        short = np.flatnonzero(lengths <= usual)
        self._long = [int(k) for k in np.flatnonzero(lengths > usual)]
        self._order = short[np.argsort(starts[short], kind="stable")]
        self._starts = starts[self._order]
        self._longest = int(lengths[short].max()) if short.size else 0

    def __call__(self, ts: datetime) -> tuple[float, float]:
        if not self._order.size and not self._long:  # a node without Lustre traffic
            return 0.0, 0.0
        at = _micros(ts)
        first = int(np.searchsorted(self._starts, at - self._longest, side="left"))
        last = int(np.searchsorted(self._starts, at, side="left"))  # start < ts
        candidates = [int(k) for k in self._order[first:last]] + self._long
        rx = tx = 0.0
        for k in sorted(candidates):
            item = self._intervals[k]
            if item.start < ts <= item.end:
                rx += item.read_bytes_per_second
                tx += item.write_bytes_per_second
        return rx, tx


@dataclass(frozen=True, slots=True)
class ResidualPoint:
    """``R(t)`` each way for one interval, with what ``E(t)`` was made of."""

    ts: datetime
    interval_seconds: float
    tx: float
    rx: float
    expected_tx: float
    expected_rx: float
    top_tx: tuple[str, int]
    top_rx: tuple[str, int]


@dataclass(frozen=True, slots=True)
class ResidualSeries:
    """The residual of one node while one job held it (``job`` None: the node was idle and
    its residual is ``O − background``), after the job's calibration window.

    Attributes:
        k_tx / k_rx: the calibrated factors (None for idle stretches).
        sigma_tx / sigma_rx: the residual's noise over the calibration window.
        calibration_points: the intervals ``k`` and ``sigma`` were calibrated on. ``k``'s
            error shifts every later residual by the calibration window's mean noise,
            whose standard deviation is ``sigma / sqrt(calibration_points)``
            (:meth:`level_error`).
    """

    node: str
    job: JobSpan | None
    points: tuple[ResidualPoint, ...]
    k_tx: float | None = None
    k_rx: float | None = None
    sigma_tx: float = 0.0
    sigma_rx: float = 0.0
    calibration_points: int = 0

    def sigma(self, way: str) -> float:
        """``sigma_R`` of ``way`` ("tx" or "rx")."""
        return self.sigma_tx if way == "tx" else self.sigma_rx

    def level_error(self, way: str) -> float:
        """The standard deviation of the residual's level after calibration (bytes per
        second): ``sigma / sqrt(calibration_points)``, 0 without a calibration."""
        if self.calibration_points <= 0:
            return 0.0
        return self.sigma(way) / math.sqrt(self.calibration_points)


def bucket(ts: datetime, bucket_seconds: float) -> int:
    """The scrape slot of ``ts`` (scrapes of one cycle land in the same slot)."""
    # the store's times are naive UTC: the difference from the epoch is what timestamp()
    # computes for an aware one, without the replace() (a million calls per run at 128 nodes)
    seconds = (ts - _EPOCH).total_seconds() if ts.tzinfo is None else epoch_seconds(ts)
    return int(seconds // bucket_seconds)


def residual_series(
    series: Mapping[str, Sequence[NodePoint]],
    jobs: Iterable[JobSpan],
    *,
    lustre: LustreRates,
    background_bytes_per_second: float,
    calibration_seconds: float,
    min_calibration_points: int,
    bucket_seconds: float,
) -> list[ResidualSeries]:
    """The residual of every node (module docstring), per job and for idle stretches.

    Returns:
        One series per (job, node) whose job had ``min_calibration_points`` intervals in its
        calibration window (points after that window only), and one per idle node (points
        while no job held it).
    """
    jobs = list(jobs)
    out: list[ResidualSeries] = []

    lustre_of: dict[str, LustreAt] = {}  # built for the nodes asked only

    def net(node: str, p: NodePoint) -> tuple[float, float]:
        at = lustre_of.get(node)
        if at is None:
            at = lustre_of[node] = LustreAt(lustre.get(node, ()))
        lrx, ltx = at(p.ts)
        return (
            p.tx - ltx - background_bytes_per_second,
            p.rx - lrx - background_bytes_per_second,
        )

    owner: dict[tuple[str, datetime], JobSpan | None] = {}
    slot_of: dict[datetime, int] = {}  # the nodes of a cycle share their scrape times
    by_node = jobs_by_node(jobs)
    for node, points in series.items():
        held_by = by_node.get(node, [])
        for p in points:
            owner[node, p.ts] = first_running(held_by, p.ts)
            if p.ts not in slot_of:
                slot_of[p.ts] = bucket(p.ts, bucket_seconds)
    for job in sorted(jobs, key=lambda j: j.job_id):
        if job.start is None:
            continue
        nodes = [n for n in job.nodes if n in series]
        mine = {n: [p for p in series[n] if owner.get((n, p.ts)) == job] for n in nodes}
        slots: dict[int, list[tuple[float, float]]] = {}
        for n in nodes:
            for p in mine[n]:
                slots.setdefault(slot_of[p.ts], []).append(net(n, p))
        collective: dict[int, tuple[float, float]] = {}
        for key, values in slots.items():
            if len(job.nodes) < 2:
                collective[key] = (1.0, 1.0)
            else:
                collective[key] = (
                    median([v[0] for v in values]) or 0.0,
                    median([v[1] for v in values]) or 0.0,
                )
        calibration_end = job.start + timedelta(seconds=calibration_seconds)
        calibrated: list[ResidualSeries] = []
        for n in nodes:
            calib = [p for p in mine[n] if p.ts <= calibration_end]
            if len(calib) < min_calibration_points:
                continue
            sums = [0.0, 0.0, 0.0, 0.0]
            for p in calib:
                ntx, nrx = net(n, p)
                ctx, crx = collective[slot_of[p.ts]]
                sums[0] += ntx
                sums[1] += nrx
                sums[2] += ctx
                sums[3] += crx
            k_tx = sums[0] / sums[2] if sums[2] > 0 else 0.0
            k_rx = sums[1] / sums[3] if sums[3] > 0 else 0.0

            def residual(
                p: NodePoint,
                n: str = n,
                k_tx: float = k_tx,
                k_rx: float = k_rx,
                collective: dict[int, tuple[float, float]] = collective,
            ) -> ResidualPoint:
                ntx, nrx = net(n, p)
                ctx, crx = collective[slot_of[p.ts]]
                return ResidualPoint(
                    ts=p.ts,
                    interval_seconds=p.interval_seconds,
                    tx=ntx - k_tx * ctx,
                    rx=nrx - k_rx * crx,
                    expected_tx=p.tx - ntx + k_tx * ctx,
                    expected_rx=p.rx - nrx + k_rx * crx,
                    top_tx=p.top_tx,
                    top_rx=p.top_rx,
                )

            calib_r = [residual(p) for p in calib]
            calibrated.append(
                ResidualSeries(
                    node=n,
                    job=job,
                    points=tuple(residual(p) for p in mine[n] if p.ts > calibration_end),
                    k_tx=k_tx,
                    k_rx=k_rx,
                    sigma_tx=robust_sigma([r.tx for r in calib_r]),
                    sigma_rx=robust_sigma([r.rx for r in calib_r]),
                    calibration_points=len(calib_r),
                )
            )
        out += with_job_noise_floor(calibrated)
    for node, points in sorted(series.items()):
        idle = [p for p in points if owner.get((node, p.ts)) is None]
        if idle:
            out.append(
                ResidualSeries(
                    node=node,
                    job=None,
                    points=tuple(
                        ResidualPoint(
                            ts=p.ts,
                            interval_seconds=p.interval_seconds,
                            tx=p.tx - background_bytes_per_second,
                            rx=p.rx - background_bytes_per_second,
                            expected_tx=background_bytes_per_second,
                            expected_rx=background_bytes_per_second,
                            top_tx=p.top_tx,
                            top_rx=p.top_rx,
                        )
                        for p in idle
                    ),
                )
            )
    return out


def with_job_noise_floor(calibrated: Sequence[ResidualSeries]) -> list[ResidualSeries]:
    """The job's series, each ``sigma_R`` at least the median ``sigma_R`` over the job's nodes
    and both ways.

    One series' 19-scrape calibration draws a quiet stretch one time in forty (its sigma a
    third or more below the truth), and 3 sigma_R then fires on noise; the job's nodes move
    the same collective traffic, so the job's typical noise is a floor that needs no more
    data. A node noisier than its job keeps its own, larger sigma."""
    floor = median([s.sigma(way) for s in calibrated for way in ("tx", "rx")]) or 0.0
    return [
        replace(s, sigma_tx=max(s.sigma_tx, floor), sigma_rx=max(s.sigma_rx, floor))
        for s in calibrated
    ]


def top_port(ports: Iterable[tuple[str, int]]) -> tuple[str, int]:
    """The port named most often (ties: the first device by name)."""
    counts = Counter(ports)
    return min(counts, key=lambda p: (-counts[p], p))
