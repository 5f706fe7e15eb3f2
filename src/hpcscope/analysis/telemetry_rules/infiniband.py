"""RD-1, RD-2, RD-2b, RD-3, RD-5, RD-6, RD-7: InfiniBand port counters (``security.md`` §3).

With verbs and GPUDirect RDMA the payload never crosses a syscall: port counters are what is
left. The rules read ``ib_port_counters`` rows (node_exporter's names), the jobs holding the
nodes, the nodes' Lustre traffic (LNet shares the HCA) and the HCA -> GPU map (one ConnectX
per GPU, PCI affinity), and return alerts naming node, job, user, account, the port and its
GPU. Thresholds are the rule file's (``deploy/rules/security-telemetry.yaml``).

========  ==============================================================================
RD-1      a node no job holds moves more than max(idle_factor × idle p99.9, floor) for
          ``min_seconds``; the idle quantile is taken over idle intervals under the floor,
          so the attack cannot raise its own threshold
RD-2      residual ``R`` (:mod:`~hpcscope.analysis.telemetry_rules.residual`) above
          max(sigma_factor × σ_R, floor) on ``consecutive_scrapes`` scrapes in a row
RD-2b     ∫ max(R − dead_band_sigmas × σ_R, 0) over the last ``window_seconds`` above
          ``integral_bytes`` (HIGH above ``high_integral_bytes``); intervals RD-2 already
          flagged are not counted again. The dead band keeps the residual's own noise out:
          ∫ max(N, 0) of zero-mean noise grows by 0.4 σ per second (15 GB an hour at σ 10 MB/s)
          and would page every busy job; with one σ it grows by 0.08 σ
RD-3      in a multi-node job: node transmit / job median > ``ratio_to_median`` or
          (transmit − receive) / receive > ``asymmetry_ratio`` (LNet removed) for
          ``min_seconds``; a node asymmetric through its calibration window is asymmetric by
          design (pipeline stages) and skipped
RD-5      any rise of constraint or remote-access error counters outside ``faulty_windows``
RD-6      any counter that went down (``perfquery -R``) outside ``maintenance_windows``
RD-7      residual transmit of node A correlates above ``correlation`` with residual receive
          of node B (no shared job) over the last ``window_seconds``
========  ==============================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta

import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    JobSpan,
    PortKey,
    enabled,
    first_running,
    jobs_by_node,
    median,
    megabytes,
    merge,
    port_gpu,
    port_subject,
    quantile,
    runs,
    span_text,
    telemetry_alert,
)
from hpcscope.analysis.telemetry_rules.ib_view import IbView, ib_view
from hpcscope.analysis.telemetry_rules.port_events import (
    RD5_COUNTERS,
    rd5_columns,
    rd5_error_counters,
    rd6_counter_resets,
    rd7_correlated_pairs,
)
from hpcscope.analysis.telemetry_rules.residual import (
    RX,
    TX,
    LustreAt,
    LustreRates,
    NodePoint,
    ResidualSeries,
    bucket,
    residual_series,
    top_port,
)
from hpcscope.model.alerts import Alert, RuleSpec, Severity

SOURCE = "ib_port_counters"


def rd1_idle_traffic(
    spec: RuleSpec,
    series: Mapping[str, Sequence[NodePoint]],
    jobs: Sequence[JobSpan],
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-1 (CRITICAL): a node without a running job transmits or receives in bulk."""
    floor = spec.threshold("floor_bytes_per_second")
    out: list[Alert] = []
    by_node = jobs_by_node(jobs)
    for node, points in sorted(series.items()):
        mine = by_node.get(node, [])
        idle = [
            p
            for p in points
            if first_running(mine, p.ts) is None
            and first_running(mine, p.ts - timedelta(seconds=p.interval_seconds)) is None
        ]
        quiet = [max(p.tx, p.rx) for p in idle if max(p.tx, p.rx) <= floor]
        p999 = quantile(quiet, spec.threshold("idle_quantile")) or 0.0
        limit = max(spec.threshold("idle_factor") * p999, floor)
        idle_ts = {p.ts for p in idle}
        flags = [p.ts in idle_ts and max(p.tx, p.rx) > limit for p in points]
        for first, last in runs(flags):
            run = points[first : last + 1]
            if sum(p.interval_seconds for p in run) < spec.threshold("min_seconds"):
                continue
            sending = sum(p.tx for p in run) >= sum(p.rx for p in run)
            way = "transmitted" if sending else "received"
            port = top_port(p.top_tx if sending else p.top_rx for p in run)
            moved = sum((p.tx if sending else p.rx) * p.interval_seconds for p in run)
            peak = max(p.tx if sending else p.rx for p in run)
            start = run[0].ts - timedelta(seconds=run[0].interval_seconds)
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=run[0].ts,
                    last_seen=run[-1].ts,
                    node=node,
                    job=None,
                    gpu=port_gpu(port_gpus, node, port),
                    subject=port_subject(port),
                    summary=(
                        f"no job on {node}: {megabytes(moved)} {way} over "
                        f"{span_text(start, run[-1].ts)}, peak {megabytes(peak)}/s (threshold "
                        f"{megabytes(limit)}/s = max({spec.threshold('idle_factor'):g} x idle "
                        f"p99.9 {megabytes(p999)}/s, {megabytes(floor)}/s)), most on "
                        f"{port[0]}/{port[1]}"
                    ),
                    source=SOURCE,
                    position=f"node {node} {span_text(start, run[-1].ts)}",
                )
            )
    return out


def level_allowance(rd2: RuleSpec | None, s: ResidualSeries, way: str) -> float:
    """What the residual's level may be off by from the short calibration alone (bytes per
    second): ``calibration_error_sigmas`` (RD-2's model, 3 when a site's file predates it)
    x :meth:`ResidualSeries.level_error`. Without it, a job whose 5-minute calibration drew
    low noise carries that offset for its whole life, and an hour of it piles up into RD-2b."""
    factor = 3.0 if rd2 is None else float(rd2.thresholds.get("calibration_error_sigmas", 3.0))
    return factor * s.level_error(way)


def _rd2_limit(spec: RuleSpec, s: ResidualSeries, way: str) -> float:
    factor = spec.threshold("sigma_factor")
    return max(
        factor * s.sigma(way) + level_allowance(spec, s, way),
        spec.threshold("floor_bytes_per_second"),
    )


def _rd2_runs(spec: RuleSpec, s: ResidualSeries) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    for way in ("tx", "rx"):
        limit = _rd2_limit(spec, s, way)
        flags = [(p.tx if way == "tx" else p.rx) > limit for p in s.points]
        for first, last in runs(flags):
            if last - first + 1 >= spec.threshold("consecutive_scrapes"):
                found.append((first, last, way))
    return found


def rd2_residual(
    spec: RuleSpec, residuals: Sequence[ResidualSeries], port_gpus: Mapping[PortKey, int]
) -> list[Alert]:
    """RD-2 (HIGH): traffic the node's job does not explain, several scrapes in a row."""
    out: list[Alert] = []
    for s in residuals:
        if s.job is None:
            continue
        for first, last, way in _rd2_runs(spec, s):
            run = s.points[first : last + 1]
            values = [p.tx if way == "tx" else p.rx for p in run]
            sigma = s.sigma(way)
            k = s.k_tx if way == "tx" else s.k_rx
            port = top_port(p.top_tx if way == "tx" else p.top_rx for p in run)
            expected = median([p.expected_tx if way == "tx" else p.expected_rx for p in run])
            text = "transmit" if way == "tx" else "receive"
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=run[0].ts,
                    last_seen=run[-1].ts,
                    node=s.node,
                    job=s.job,
                    gpu=port_gpu(port_gpus, s.node, port),
                    subject=port_subject(port),
                    summary=(
                        f"{text} residual over {len(run)} scrapes: median "
                        f"{megabytes(median(values) or 0.0)}/s above the expected "
                        f"{megabytes(expected or 0.0)}/s (k {k or 0.0:.3g} from the job's "
                        f"calibration; threshold max({spec.threshold('sigma_factor'):g} x "
                        f"sigma_R {megabytes(sigma)}/s + calibration allowance "
                        f"{megabytes(level_allowance(spec, s, way))}/s, "
                        f"{megabytes(spec.threshold('floor_bytes_per_second'))}/s)), most on "
                        f"{port[0]}/{port[1]}"
                    ),
                    source=SOURCE,
                    position=f"node {s.node} {span_text(run[0].ts, run[-1].ts)}",
                )
            )
    return out


def rd2b_low_and_slow(
    spec: RuleSpec,
    rd2: RuleSpec | None,
    residuals: Sequence[ResidualSeries],
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-2b (MEDIUM, HIGH above ``high_integral_bytes``): residual bytes piling up."""
    out: list[Alert] = []
    for s in residuals:
        if s.job is None or not s.points:
            continue
        flagged: set[tuple[int, str]] = set()
        if rd2 is not None:
            for first, last, way in _rd2_runs(rd2, s):
                flagged |= {(i, way) for i in range(first, last + 1)}
        end = s.points[-1].ts
        since = end - timedelta(seconds=spec.threshold("window_seconds"))
        for way in ("tx", "rx"):
            window = [
                (i, p) for i, p in enumerate(s.points) if p.ts > since and (i, way) not in flagged
            ]
            band = spec.threshold("dead_band_sigmas") * s.sigma(way) + level_allowance(rd2, s, way)
            moved = sum(
                max((p.tx if way == "tx" else p.rx) - band, 0.0) * p.interval_seconds
                for _, p in window
            )
            if moved <= spec.threshold("integral_bytes"):
                continue
            high = moved > spec.threshold("high_integral_bytes")
            port = top_port(p.top_tx if way == "tx" else p.top_rx for _, p in window)
            text = "transmitted" if way == "tx" else "received"
            out.append(
                telemetry_alert(
                    spec,
                    first_seen=window[0][1].ts,
                    last_seen=end,
                    node=s.node,
                    job=s.job,
                    gpu=port_gpu(port_gpus, s.node, port),
                    subject=port_subject(port),
                    severity=Severity.HIGH if high else Severity.MEDIUM,
                    summary=(
                        f"{megabytes(moved)} {text} beyond what the job explains over the last "
                        f"{spec.threshold('window_seconds'):g} s (threshold "
                        f"{megabytes(spec.threshold('integral_bytes'))}; HIGH above "
                        f"{megabytes(spec.threshold('high_integral_bytes'))}), most on "
                        f"{port[0]}/{port[1]}"
                    ),
                    source=SOURCE,
                    position=f"node {s.node} {span_text(window[0][1].ts, end)}",
                )
            )
    return out


def rd3_asymmetry(
    spec: RuleSpec,
    series: Mapping[str, Sequence[NodePoint]],
    jobs: Sequence[JobSpan],
    *,
    lustre: LustreRates,
    bucket_seconds: float,
    calibration_seconds: float,
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """RD-3 (HIGH): a node of a multi-node job sends far more than its peers or receives."""
    out: list[Alert] = []
    min_rate = spec.threshold("min_rate_bytes_per_second")
    for job in jobs:
        nodes = [n for n in job.nodes if n in series]
        if len(job.nodes) < 2 or len(nodes) < 2 or job.start is None:
            continue
        net: dict[str, list[tuple[NodePoint, float, float]]] = {}
        slots: dict[int, list[float]] = {}
        for n in nodes:
            lustre_of = LustreAt(lustre.get(n, ()))
            for p in series[n]:
                if not job.running(p.ts):
                    continue
                lrx, ltx = lustre_of(p.ts)
                net.setdefault(n, []).append((p, p.tx - ltx, p.rx - lrx))
                slots.setdefault(bucket(p.ts, bucket_seconds), []).append(p.tx - ltx)
        calibration_end = job.start + timedelta(seconds=calibration_seconds)
        medians = {key: median(values) or 0.0 for key, values in slots.items()}
        for n in nodes:
            rows = net.get(n, [])

            def hot(
                row: tuple[NodePoint, float, float], medians: dict[int, float] = medians
            ) -> bool:
                p, tx, rx = row
                med = medians[bucket(p.ts, bucket_seconds)]
                if med < min_rate:
                    return False
                ratio = tx / med
                asym = (tx - rx) / rx if rx >= min_rate else 0.0
                return ratio > spec.threshold("ratio_to_median") or (
                    asym > spec.threshold("asymmetry_ratio")
                )

            calib = [r for r in rows if r[0].ts <= calibration_end]
            if calib and sum(hot(r) for r in calib) * 2 > len(calib):
                continue  # asymmetric from the start: by design (pipeline stage), not an attack
            flags = [r[0].ts > calibration_end and hot(r) for r in rows]
            for first, last in runs(flags):
                run = rows[first : last + 1]
                if sum(r[0].interval_seconds for r in run) < spec.threshold("min_seconds"):
                    continue
                port = top_port(r[0].top_tx for r in run)
                ratios = [r[1] / (medians[bucket(r[0].ts, bucket_seconds)] or 1.0)
                          for r in run]  # fmt: skip
                out.append(
                    telemetry_alert(
                        spec,
                        first_seen=run[0][0].ts,
                        last_seen=run[-1][0].ts,
                        node=n,
                        job=job,
                        gpu=port_gpu(port_gpus, n, port),
                        subject=port_subject(port),
                        summary=(
                            f"transmit {median(ratios) or 0.0:.2f}x the job's median node over "
                            f"{span_text(run[0][0].ts, run[-1][0].ts)} (thresholds "
                            f"{spec.threshold('ratio_to_median'):g}x median, "
                            f"{spec.threshold('asymmetry_ratio'):g} (tx-rx)/rx); transmit "
                            f"{megabytes(median([r[1] for r in run]) or 0.0)}/s, receive "
                            f"{megabytes(median([r[2] for r in run]) or 0.0)}/s, LNet removed"
                        ),
                        source=SOURCE,
                        position=f"node {n} {span_text(run[0][0].ts, run[-1][0].ts)}",
                    )
                )
    return out


def infiniband_alerts(
    counters: pl.DataFrame,
    jobs: Iterable[JobSpan],
    *,
    rules: Mapping[str, RuleSpec],
    lustre: LustreRates,
    port_gpus: Mapping[PortKey, int],
    widths_bits: Mapping[str, int] | None = None,
) -> list[Alert]:
    """Every enabled RD rule over ``ib_port_counters`` rows.

    Args:
        counters: ``ib_port_counters`` rows (the window to judge plus the calibration windows
            of the jobs running in it).
        jobs: the jobs overlapping those rows.
        rules: the site's rules by id (RD-2 carries the expected-traffic model's thresholds:
            ``calibration_seconds``, ``min_calibration_points``, ``bucket_seconds``,
            ``background_bytes_per_second``).
        lustre: node -> its Lustre (LNet) traffic.
        port_gpus: (node, device, port) -> the GPU beside that HCA.
        widths_bits: counter widths (32-bit legacy counters saturate).
    """
    view = ib_view(counters, rise_columns=rd5_columns(rules.get("RD-5")), widths_bits=widths_bits)
    return view_alerts(view, jobs, rules=rules, lustre=lustre, port_gpus=port_gpus)


def view_alerts(
    view: IbView,
    jobs: Iterable[JobSpan],
    *,
    rules: Mapping[str, RuleSpec],
    lustre: LustreRates,
    port_gpus: Mapping[PortKey, int],
) -> list[Alert]:
    """Every enabled RD rule over an :class:`~hpcscope.analysis.telemetry_rules.ib_view.IbView`
    (what :func:`infiniband_alerts` judges of its rows; the service keeps one run to run)."""
    jobs = list(jobs)
    series = view.series
    out: list[Alert] = []
    if (spec := enabled(rules, "RD-1")) is not None:
        out += rd1_idle_traffic(spec, series, jobs, port_gpus)
    model = rules.get("RD-2")
    residuals: list[ResidualSeries] = []
    bucket_seconds = model.threshold("bucket_seconds") if model is not None else 15.0
    calibration = model.threshold("calibration_seconds") if model is not None else 300.0
    if model is not None:
        residuals = residual_series(
            series,
            jobs,
            lustre=lustre,
            background_bytes_per_second=model.threshold("background_bytes_per_second"),
            calibration_seconds=calibration,
            min_calibration_points=int(model.threshold("min_calibration_points")),
            bucket_seconds=bucket_seconds,
        )
    if (spec := enabled(rules, "RD-2")) is not None:
        out += rd2_residual(spec, residuals, port_gpus)
    if (spec := enabled(rules, "RD-2b")) is not None:
        out += rd2b_low_and_slow(spec, enabled(rules, "RD-2"), residuals, port_gpus)
    if (spec := enabled(rules, "RD-3")) is not None:
        out += rd3_asymmetry(
            spec,
            series,
            jobs,
            lustre=lustre,
            bucket_seconds=bucket_seconds,
            calibration_seconds=calibration,
            port_gpus=port_gpus,
        )
    if (spec := enabled(rules, "RD-5")) is not None and view.rises.height:
        out += rd5_error_counters(spec, view.rises, jobs, port_gpus)
    if (spec := enabled(rules, "RD-6")) is not None and view.resets.height:
        out += rd6_counter_resets(spec, view.resets, jobs, port_gpus)
    if (spec := enabled(rules, "RD-7")) is not None:
        out += rd7_correlated_pairs(
            spec, residuals, bucket_seconds=bucket_seconds, port_gpus=port_gpus
        )
    return merge(out)


__all__ = ["RD5_COUNTERS", "RX", "TX", "infiniband_alerts", "view_alerts"]
