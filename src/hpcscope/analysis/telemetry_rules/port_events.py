"""RD-5 and RD-6: InfiniBand error counters that rose, counters that went down; RD-7: a
correlated residual pair (see :mod:`hpcscope.analysis.telemetry_rules.infiniband`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    JobSpan,
    PortKey,
    covered,
    job_at,
    megabytes,
    parse_windows,
    port_gpu,
    port_subject,
    span_text,
    telemetry_alert,
)
from hpcscope.analysis.telemetry_rules.residual import (
    ResidualPoint,
    ResidualSeries,
    bucket,
    top_port,
)
from hpcscope.model.alerts import Alert, RuleSpec

SOURCE = "ib_port_counters"

#: Error counters RD-5 watches (node_exporter names, without ``node_infiniband_``).
RD5_COUNTERS: tuple[str, ...] = (
    "port_constraint_errors_received_total",
    "port_constraint_errors_transmitted_total",
    "req_remote_access_errors_total",
    "resp_remote_access_errors_total",
)


def rd5_columns(spec: RuleSpec | None) -> tuple[str, ...]:
    """The ``<counter>_per_second`` rate columns RD-5 watches (none when it is off)."""
    if spec is None or not spec.enabled:
        return ()
    return tuple(_rate(c) for c in (spec.items("counters") or RD5_COUNTERS))


def _rate(counter: str) -> str:
    return counter.removesuffix("_total") + "_per_second"


def rd5_error_counters(
    spec: RuleSpec,
    rates: pl.DataFrame,
    jobs: Sequence[JobSpan],
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-5 (HIGH): constraint errors (P_Key probing) or remote access errors (rkey guessing)
    rose outside a known-faulty window."""
    windows = parse_windows(spec.items("faulty_windows"))
    watched = list(spec.items("counters") or RD5_COUNTERS)
    columns = [_rate(c) for c in watched]
    present = [(c, col) for c, col in zip(watched, columns, strict=True) if col in rates.columns]
    out: list[Alert] = []
    if rates.height == 0 or not present:
        return out
    rises: dict[PortKey, list[tuple[datetime, str, float]]] = {}
    # only the rows where a watched counter rose go through Python (a healthy fabric has none:
    # iterating every port's every interval was most of a 128-node cycle's rule time)
    rose = pl.any_horizontal([pl.col(col).fill_null(0) > 0 for _, col in present])
    for row in rates.filter(rose).sort("node", "device", "port", "ts").iter_rows(named=True):
        node, ts = str(row["node"]), row["ts"]
        if covered(windows, node, ts):
            continue
        for counter, column in present:
            rate = row[column]
            if rate is not None and rate > 0:
                increase = float(rate) * float(row["interval_seconds"])
                key = (node, str(row["device"]), int(row["port"]))
                rises.setdefault(key, []).append((ts, counter, increase))
    for (node, device, port), items in sorted(rises.items()):
        totals: dict[str, float] = {}
        for _, counter, increase in items:
            totals[counter] = totals.get(counter, 0.0) + increase
        first, last = items[0][0], items[-1][0]
        text = ", ".join(f"{c} +{v:.0f}" for c, v in sorted(totals.items()))
        out.append(
            telemetry_alert(
                spec,
                first_seen=first,
                last_seen=last,
                node=node,
                job=job_at(jobs, node, first),
                gpu=port_gpus.get((node, device, port)),
                subject=port_subject((device, port)),
                summary=f"{device}/{port}: {text} over {span_text(first, last)}, outside any "
                "known-faulty window",
                source=SOURCE,
                position=f"node {node} device {device} port {port}",
            )
        )
    return out


def rd6_counter_resets(
    spec: RuleSpec,
    resets: pl.DataFrame,
    jobs: Sequence[JobSpan],
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-6 (HIGH): a port counter went down (``perfquery -r/-R``) outside maintenance.

    ``resets`` are :func:`~hpcscope.analysis.infiniband.counter_resets` rows."""
    windows = parse_windows(spec.items("maintenance_windows"))
    if resets.height == 0:
        return []
    grouped: dict[tuple[PortKey, datetime], list[tuple[str, float, float]]] = {}
    for row in resets.iter_rows(named=True):
        node, ts = str(row["node"]), row["ts"]
        if covered(windows, node, ts):
            continue
        key = ((node, str(row["device"]), int(row["port"])), ts)
        grouped.setdefault(key, []).append(
            (str(row["counter"]), float(row["before"]), float(row["after"]))
        )
    out: list[Alert] = []
    for ((node, device, port), ts), items in sorted(grouped.items()):
        data = [i for i in items if i[0].startswith("port_data_")]
        shown = (data or items)[:3]
        text = "; ".join(f"{c} {b:.4g} -> {a:.4g}" for c, b, a in shown)
        out.append(
            telemetry_alert(
                spec,
                first_seen=ts,
                last_seen=ts,
                node=node,
                job=job_at(jobs, node, ts),
                gpu=port_gpus.get((node, device, port)),
                subject=port_subject((device, port)),
                summary=f"{len(items)} counters of {device}/{port} went down ({text}): a reset "
                "outside maintenance hides the traffic before it",
                source=SOURCE,
                position=f"node {node} device {device} port {port} at {ts.isoformat()}Z",
            )
        )
    return out


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (sx * sy)


def rd7_correlated_pairs(
    spec: RuleSpec,
    residuals: Sequence[ResidualSeries],
    *,
    bucket_seconds: float,
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-7 (MEDIUM): node A's residual transmit follows node B's residual receive."""
    by_node: dict[str, list[tuple[ResidualPoint, JobSpan | None]]] = {}
    for s in residuals:
        if s.points:
            by_node.setdefault(s.node, []).extend((p, s.job) for p in s.points)
    if not by_node:
        return []
    end = max(p.ts for items in by_node.values() for p, _ in items)
    since = end - timedelta(seconds=spec.threshold("window_seconds"))
    recent = {
        n: {bucket(p.ts, bucket_seconds): (p, j) for p, j in items if p.ts > since}
        for n, items in by_node.items()
    }
    out: list[Alert] = []
    for a, a_points in sorted(recent.items()):
        for b, b_points in sorted(recent.items()):
            if a == b:
                continue
            a_jobs = {j.job_id for _, j in a_points.values() if j is not None}
            b_jobs = {j.job_id for _, j in b_points.values() if j is not None}
            if a_jobs & b_jobs:
                continue  # the job's own collective traffic between its nodes
            common = sorted(set(a_points) & set(b_points))
            if len(common) < spec.threshold("min_points"):
                continue
            xs = [a_points[k][0].tx for k in common]
            ys = [b_points[k][0].rx for k in common]
            if sum(xs) / len(xs) < spec.threshold("min_residual_bytes_per_second"):
                continue
            r = _pearson(xs, ys)
            if r is None or r <= spec.threshold("correlation"):
                continue
            last, job = a_points[common[-1]]
            first = a_points[common[0]][0]
            port = top_port(a_points[k][0].top_tx for k in common)
            b_job = b_points[common[-1]][1]
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=first.ts,
                    last_seen=last.ts,
                    node=a,
                    job=job,
                    gpu=port_gpu(port_gpus, a, port),
                    subject=f"to {b}",
                    summary=(
                        f"residual transmit of {a} correlates {r:.3f} with residual receive of "
                        f"{b} (job {b_job.job_id if b_job else 'none'}) over {len(common)} "
                        f"scrapes (threshold {spec.threshold('correlation'):g}); mean residual "
                        f"{megabytes(sum(xs) / len(xs))}/s, most on {port[0]}/{port[1]}"
                    ),
                    source=SOURCE,
                    position=f"nodes {a} -> {b} {span_text(first.ts, last.ts)}",
                )
            )
    return out
