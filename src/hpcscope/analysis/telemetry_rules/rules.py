"""The telemetry rules as one evaluation: what they need from the rule file, and the run.

:func:`evaluate` takes what the service read from the store (:class:`TelemetryInputs`) and
the site's rules, runs every registered telemetry evaluator (:data:`RULES`, and any module's
``RULES`` of kind ``telemetry``: the registry) and returns the alerts merged by
deduplication key (the same rule on the same job, node, GPU and subject is one alert whose
``count`` is its firings in this evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import polars as pl

from hpcscope.analysis.registry import registry
from hpcscope.analysis.telemetry_rules.common import (
    GpuAllocation,
    JobSpan,
    PortKey,
    enabled,
    merge,
    parse_windows,
)
from hpcscope.analysis.telemetry_rules.gpu import gpu_alerts
from hpcscope.analysis.telemetry_rules.ib_view import IbView
from hpcscope.analysis.telemetry_rules.infiniband import infiniband_alerts, view_alerts
from hpcscope.analysis.telemetry_rules.lustre import (
    lustre_alerts,
    node_lustre_rates,
    parse_datasets,
)
from hpcscope.analysis.telemetry_rules.xid import gm4_xid_burst
from hpcscope.model.alerts import Alert, RuleSpec, Vector
from hpcscope.model.rules import ListCheck, Rule, RuleKind, distinct_evaluators


def _check_windows(name: str) -> ListCheck:
    def check(spec: RuleSpec) -> list[str]:
        try:
            parse_windows(spec.items(name))
        except ValueError as exc:
            return [f"{spec.rule_id}: {exc}"]
        return []

    return check


def _check_datasets(spec: RuleSpec) -> list[str]:
    try:
        parse_datasets(spec.items("datasets"))
    except ValueError as exc:
        return [f"DP-1: {exc}"]
    return []


def _check_xids(spec: RuleSpec) -> list[str]:
    return [f"GM-4: Xid {x!r} is not a number" for x in spec.items("xids") if not x.isdigit()]


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


#: A telemetry rule's evaluator: what the service read and the site's rules -> alerts (not
#: merged; each evaluator skips the rules the site disabled).
TelemetryEvaluator = Callable[[TelemetryInputs, Mapping[str, RuleSpec]], list[Alert]]


def telemetry_rule(
    rule_id: str,
    vector: Vector,
    evaluator: TelemetryEvaluator,
    *,
    thresholds: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
    check: ListCheck | None = None,
) -> Rule:
    """A telemetry rule's declaration (for a module's ``RULES``)."""
    return Rule(
        rule_id, vector, RuleKind.TELEMETRY, evaluator, thresholds=thresholds, lists=lists,
        check=check,
    )  # fmt: skip


def evaluate(
    inputs: TelemetryInputs,
    rules: Mapping[str, RuleSpec],
    *,
    registered: Sequence[Rule] | None = None,
) -> list[Alert]:
    """Every registered telemetry evaluator (default: the registry's) over ``inputs``;
    alerts merged by deduplication key."""
    declared = registry().of_kind(RuleKind.TELEMETRY) if registered is None else registered
    evaluators = [cast(TelemetryEvaluator, e) for e in distinct_evaluators(declared)]
    return merge([alert for evaluator in evaluators for alert in evaluator(inputs, rules)])


def ib_evaluator(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """The InfiniBand rules (RD-1, RD-2, RD-2b, RD-3, RD-5, RD-6, RD-7) over the window."""
    by_id = {j.job_id: j for j in inputs.jobs}
    lustre = node_lustre_rates(inputs.job_stats, by_id) if inputs.job_stats.height else {}
    if inputs.ib is not None:
        return view_alerts(
            inputs.ib, inputs.jobs, rules=rules, lustre=lustre, port_gpus=inputs.port_gpus
        )
    return infiniband_alerts(
        inputs.ib_counters, inputs.jobs, rules=rules, lustre=lustre, port_gpus=inputs.port_gpus
    )


def gpu_evaluator(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """SC-4, GM-1, GM-2 over the GPU samples, NVML processes and allocations."""
    by_id = {j.job_id: j for j in inputs.jobs}
    return gpu_alerts(
        inputs.gpu_samples, inputs.gpu_processes, inputs.allocations, by_id, rules=rules
    )


def xid_evaluator(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """GM-4 over the Xid counts."""
    if (spec := enabled(rules, "GM-4")) is None:
        return []
    by_id = {j.job_id: j for j in inputs.jobs}
    return gm4_xid_burst(spec, inputs.xid_counts, inputs.gpu_processes, inputs.allocations, by_id)


def lustre_evaluator(inputs: TelemetryInputs, rules: Mapping[str, RuleSpec]) -> list[Alert]:
    """DP-1, DP-2, DP-4 over the Lustre changelog and job_stats."""
    if not (inputs.changelog.height or inputs.job_stats.height):
        return []
    by_id = {j.job_id: j for j in inputs.jobs}
    changelog = inputs.changelog if inputs.changelog.height else _empty_changelog()
    job_stats = inputs.job_stats if inputs.job_stats.height else _empty_job_stats()
    return lustre_alerts(changelog, job_stats, by_id, rules=rules)


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


_RD, _SC, _GM, _DP = (Vector.RDMA, Vector.SUPPLY_CHAIN, Vector.GPU_MEMORY,
                      Vector.DATA_POISONING)  # fmt: skip
_DP1_LISTS = ("datasets", "write_types", "curation_partitions", "steward_uids",
              "training_partitions")  # fmt: skip

#: The telemetry rules (thresholds and lists: ``deploy/rules/security-telemetry.yaml``).
RULES: tuple[Rule, ...] = (
    telemetry_rule("RD-1", _RD, ib_evaluator, thresholds=(
        "idle_factor", "idle_quantile", "floor_bytes_per_second", "min_seconds")),
    telemetry_rule("RD-2", _RD, ib_evaluator, thresholds=(
        "sigma_factor", "floor_bytes_per_second", "consecutive_scrapes", "calibration_seconds",
        "min_calibration_points", "bucket_seconds", "background_bytes_per_second")),
    telemetry_rule("RD-2b", _RD, ib_evaluator, thresholds=(
        "integral_bytes", "high_integral_bytes", "window_seconds", "dead_band_sigmas")),
    telemetry_rule("RD-3", _RD, ib_evaluator, thresholds=(
        "ratio_to_median", "asymmetry_ratio", "min_seconds", "min_rate_bytes_per_second")),
    telemetry_rule("RD-5", _RD, ib_evaluator, lists=("counters", "faulty_windows"),
                   check=_check_windows("faulty_windows")),
    telemetry_rule("RD-6", _RD, ib_evaluator, lists=("maintenance_windows",),
                   check=_check_windows("maintenance_windows")),
    telemetry_rule("RD-7", _RD, ib_evaluator, thresholds=(
        "correlation", "window_seconds", "min_points", "min_residual_bytes_per_second")),
    telemetry_rule("SC-4", _SC, gpu_evaluator,
                   thresholds=("util_ratio", "sm_active_ratio", "min_seconds")),
    telemetry_rule("GM-1", _GM, gpu_evaluator, thresholds=("fb_used_bytes", "grace_seconds")),
    telemetry_rule("GM-2", _GM, gpu_evaluator, lists=("allowed_processes",)),
    telemetry_rule("DP-1", _DP, lustre_evaluator, thresholds=("reading_window_seconds",),
                   lists=_DP1_LISTS, check=_check_datasets),
    telemetry_rule("DP-2", _DP, lustre_evaluator, lists=("write_types", "manifest_names")),
    telemetry_rule("DP-4", _DP, lustre_evaluator, lists=("training_partitions",)),
    telemetry_rule("GM-4", _GM, xid_evaluator,
                   thresholds=("min_count", "window_seconds", "new_job_seconds"),
                   lists=("xids", "known_binaries"), check=_check_xids),
)  # fmt: skip
