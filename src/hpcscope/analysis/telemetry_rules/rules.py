"""The telemetry rules as one evaluation: what they need from the rule file, and the run.

:func:`evaluate` takes what the service read from the store (:class:`TelemetryInputs`) and
the site's rules, runs every enabled telemetry rule and returns the alerts merged by
deduplication key (the same rule on the same job, node, GPU and subject is one alert whose
``count`` is its firings in this evaluation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from hpcscope.analysis.telemetry_rules.common import (
    JobSpan,
    PortKey,
    enabled,
    merge,
    parse_windows,
)
from hpcscope.analysis.telemetry_rules.gpu import GpuAllocation, gpu_alerts
from hpcscope.analysis.telemetry_rules.ib_view import IbView
from hpcscope.analysis.telemetry_rules.infiniband import infiniband_alerts, view_alerts
from hpcscope.analysis.telemetry_rules.lustre import (
    lustre_alerts,
    node_lustre_rates,
    parse_datasets,
)
from hpcscope.analysis.telemetry_rules.xid import gm4_xid_burst
from hpcscope.model.alerts import Alert, RuleSpec

#: The rule ids the telemetry rules raise.
TELEMETRY_RULE_IDS: tuple[str, ...] = (
    "RD-1", "RD-2", "RD-2b", "RD-3", "RD-5", "RD-6", "RD-7", "SC-4", "GM-1", "GM-2",
    "DP-1", "DP-2", "DP-4", "GM-4",
)  # fmt: skip

#: Thresholds each telemetry rule needs (the loader rejects a rule file without them).
REQUIRED_THRESHOLDS: Mapping[str, tuple[str, ...]] = {
    "RD-1": ("idle_factor", "idle_quantile", "floor_bytes_per_second", "min_seconds"),
    "RD-2": (
        "sigma_factor", "floor_bytes_per_second", "consecutive_scrapes", "calibration_seconds",
        "min_calibration_points", "bucket_seconds", "background_bytes_per_second",
    ),
    "RD-2b": ("integral_bytes", "high_integral_bytes", "window_seconds", "dead_band_sigmas"),
    "RD-3": ("ratio_to_median", "asymmetry_ratio", "min_seconds", "min_rate_bytes_per_second"),
    "RD-7": ("correlation", "window_seconds", "min_points", "min_residual_bytes_per_second"),
    "SC-4": ("util_ratio", "sm_active_ratio", "min_seconds"),
    "GM-1": ("fb_used_bytes", "grace_seconds"),
    "DP-1": ("reading_window_seconds",),
    "GM-4": ("min_count", "window_seconds", "new_job_seconds"),
}  # fmt: skip

#: Lists each telemetry rule needs (they may be empty).
REQUIRED_LISTS: Mapping[str, tuple[str, ...]] = {
    "RD-5": ("counters", "faulty_windows"),
    "RD-6": ("maintenance_windows",),
    "GM-2": ("allowed_processes",),
    "DP-1": ("datasets", "write_types", "curation_partitions", "steward_uids",
             "training_partitions"),
    "DP-2": ("write_types", "manifest_names"),
    "DP-4": ("training_partitions",),
    "GM-4": ("xids", "known_binaries"),
}  # fmt: skip


def list_errors(rules: Mapping[str, RuleSpec]) -> list[tuple[RuleSpec, str]]:
    """Values of the telemetry rules' lists that cannot be used (a window or dataset that does
    not parse), with their rule; empty when all are good."""
    errors: list[tuple[RuleSpec, str]] = []
    for rule_id, name in (("RD-5", "faulty_windows"), ("RD-6", "maintenance_windows")):
        spec = rules.get(rule_id)
        if spec is None:
            continue
        try:
            parse_windows(spec.items(name))
        except ValueError as exc:
            errors.append((spec, f"{rule_id}: {exc}"))
    dp1 = rules.get("DP-1")
    if dp1 is not None:
        try:
            parse_datasets(dp1.items("datasets"))
        except ValueError as exc:
            errors.append((dp1, f"DP-1: {exc}"))
    gm4 = rules.get("GM-4")
    if gm4 is not None:
        errors += [(gm4, f"GM-4: Xid {x!r} is not a number")
                   for x in gm4.items("xids") if not x.isdigit()]  # fmt: skip
    return errors


def _empty() -> pl.DataFrame:
    return pl.DataFrame()


@dataclass(frozen=True)
class TelemetryInputs:
    """What the rules judge, as the service read it from the store.

    Attributes:
        ib_counters: ``ib_port_counters`` rows (the window, plus running jobs' calibration);
            judged when ``ib`` is None.
        ib: the same window already in the rules' form (the service keeps it run to run,
            :mod:`hpcscope.analysis.telemetry_rules.ib_view`); ``ib_counters`` is then unused.
        gpu_samples: ``gpu_samples`` rows (``ts, node, gpu, job_id`` and the ratios, FB used).
        gpu_processes: ``gpu_processes`` rows (NVML compute processes, with their job).
        job_stats: ``lustre_job_stats`` rows.
        changelog: ``lustre_changelog`` rows.
        jobs: the jobs overlapping the window, with owners and nodes.
        allocations: the GPU allocations overlapping the window (the job mapping).
        port_gpus: (node, device, port) -> the GPU beside that HCA.
        xid_counts: ``gpu_xid_counts`` rows (``DCGM_EXP_XID_ERRORS_COUNT`` by GPU and code).
    """

    ib_counters: pl.DataFrame = field(default_factory=_empty)
    gpu_samples: pl.DataFrame = field(default_factory=_empty)
    gpu_processes: pl.DataFrame = field(default_factory=_empty)
    job_stats: pl.DataFrame = field(default_factory=_empty)
    changelog: pl.DataFrame = field(default_factory=_empty)
    jobs: tuple[JobSpan, ...] = ()
    allocations: tuple[GpuAllocation, ...] = ()
    port_gpus: Mapping[PortKey, int] = field(default_factory=dict)
    xid_counts: pl.DataFrame = field(default_factory=_empty)
    ib: IbView | None = None


def evaluate(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """Every enabled telemetry rule over ``inputs``; alerts merged by deduplication key."""
    by_id = {j.job_id: j for j in inputs.jobs}
    lustre = node_lustre_rates(inputs.job_stats, by_id) if inputs.job_stats.height else {}
    if inputs.ib is not None:
        out = view_alerts(
            inputs.ib, inputs.jobs, rules=rules, lustre=lustre, port_gpus=inputs.port_gpus
        )
    else:
        out = infiniband_alerts(
            inputs.ib_counters, inputs.jobs, rules=rules, lustre=lustre, port_gpus=inputs.port_gpus
        )
    out += gpu_alerts(
        inputs.gpu_samples, inputs.gpu_processes, inputs.allocations, by_id, rules=rules
    )
    if (spec := enabled(rules, "GM-4")) is not None:
        out += gm4_xid_burst(
            spec, inputs.xid_counts, inputs.gpu_processes, inputs.allocations, by_id
        )
    if inputs.changelog.height or inputs.job_stats.height:
        changelog = inputs.changelog if inputs.changelog.height else _empty_changelog()
        job_stats = inputs.job_stats if inputs.job_stats.height else _empty_job_stats()
        out += lustre_alerts(changelog, job_stats, by_id, rules=rules)
    return merge(out)


def _empty_changelog() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"ts": pl.Datetime("us"), "record_index": pl.Int64, "record_type": pl.String}
    )


def _empty_job_stats() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"server": pl.String, "target": pl.String, "job_id_raw": pl.String,
                "operation": pl.String, "ts": pl.Datetime("us"), "job_id": pl.String,
                "host": pl.String, "sum_value": pl.Float64, "start_ts": pl.Datetime("us")}
    )  # fmt: skip
