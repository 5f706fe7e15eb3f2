"""The team dashboard: Slurm accounts' efficiency and GPU-hours."""

from __future__ import annotations

from typing import Any

from scripts.grafana.panels import ACCOUNT, HOURS_OVER_RANGE, dashboard, panel, per_gpu_count


def team_dashboard() -> dict[str, Any]:
    """Slurm accounts: efficiency and GPU-hours of running jobs, and finished jobs' totals."""
    account = '{account=~"$account"}'
    ratio = (
        "sum_over_time({m}{s}[$__range:$__interval]) / on (account) "
        "sum_over_time(account:DCGM_FI_PROF_SM_ACTIVE:count{s}[$__range:$__interval])"
    )
    panels = [
        panel(
            "timeseries",
            1,
            "Reported utilization vs real efficiency, per account",
            "Running jobs of each account, GPU-weighted (1-minute means): reported utilization "
            "beside SM active and tensor active.",
            [
                (
                    per_gpu_count(
                        "account:DCGM_FI_DEV_GPU_UTIL:sum_ratio_avg1m", account, "account"
                    ),
                    "{{account}} reported",
                ),
                (
                    per_gpu_count("account:DCGM_FI_PROF_SM_ACTIVE:sum_avg1m", account, "account"),
                    "{{account}} real (SM active)",
                ),
                (
                    per_gpu_count(
                        "account:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:sum_avg1m", account, "account"
                    ),
                    "{{account}} tensor active",
                ),
            ],
            unit="percentunit",
            grid=(0, 0, 24, 9),
            max_value=1,
        ),
        panel(
            "timeseries",
            2,
            "GPUs held and useful GPUs, per account",
            "GPUs the account's running jobs hold, and how many of them the SMs' work amounts "
            "to (SM active summed: useful GPU-seconds per second).",
            [
                (f"account:DCGM_FI_PROF_SM_ACTIVE:count{account}", "{{account}} held"),
                (f"account:DCGM_FI_PROF_SM_ACTIVE:sum_avg1m{account}", "{{account}} useful"),
            ],
            unit="none",
            grid=(0, 9, 12, 8),
        ),
        panel(
            "stat",
            3,
            "Real efficiency over the range, per account",
            "Useful / held GPU-time of the running jobs over the dashboard's range, beside the "
            "same ratio for reported utilization and tensor active.",
            [
                (
                    ratio.format(m="account:DCGM_FI_DEV_GPU_UTIL:sum_ratio_avg1m", s=account),
                    "{{account}} reported",
                ),
                (
                    ratio.format(m="account:DCGM_FI_PROF_SM_ACTIVE:sum_avg1m", s=account),
                    "{{account}} real (SM active)",
                ),
                (
                    ratio.format(m="account:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:sum_avg1m", s=account),
                    "{{account}} tensor active",
                ),
            ],
            unit="percentunit",
            grid=(12, 9, 12, 8),
            max_value=1,
        ),
        panel(
            "stat",
            4,
            "GPU-hours in the range (running jobs)",
            "Held and useful GPU-hours of the account's running jobs over the range, from the "
            "recording rules at the panel's interval.",
            [
                (
                    HOURS_OVER_RANGE.format(expr=f"account:DCGM_FI_PROF_SM_ACTIVE:count{account}"),
                    "{{account}} held",
                ),
                (
                    HOURS_OVER_RANGE.format(
                        expr=f"account:DCGM_FI_PROF_SM_ACTIVE:sum_avg1m{account}"
                    ),
                    "{{account}} useful",
                ),
            ],
            unit="h",
            grid=(0, 17, 12, 6),
        ),
        panel(
            "stat",
            5,
            "Finished jobs: allocated and useful GPU-hours (chargeback)",
            "hpcscope's chargeback counters of finished jobs with a kept summary, over the "
            "range (docs/chargeback.md).",
            [
                (
                    "increase(hpcscope_account_allocated_gpu_seconds_total"
                    f"{account}[$__range]) / 3600",
                    "{{account}} allocated",
                ),
                (
                    "increase(hpcscope_account_useful_gpu_seconds_total"
                    f"{account}[$__range]) / 3600",
                    "{{account}} useful",
                ),
            ],
            unit="h",
            grid=(12, 17, 12, 6),
        ),
        panel(
            "table",
            6,
            "Running jobs of the account",
            "Each running job with its user and the GPUs Slurm allocated (hpcscope's /metrics).",
            [
                (
                    "hpcscope_job_allocated_gpus * on (job_id) group_left (user, account, "
                    f"partition) hpcscope_job_info{account}",
                    "",
                )
            ],
            unit="none",
            grid=(0, 23, 24, 8),
        ),
        panel(
            "timeseries",
            7,
            "Lustre throughput per account",
            "Bytes per second the account's running jobs read from and wrote to Lustre over "
            "the last 5 minutes (job_stats, through hpcscope's /metrics).",
            [
                (
                    f"account:hpcscope_job_storage_read_bytes_per_second:sum{account}",
                    "{{account}} read",
                ),
                (
                    f"account:hpcscope_job_storage_write_bytes_per_second:sum{account}",
                    "{{account}} write",
                ),
            ],
            unit="Bps",
            grid=(0, 31, 24, 8),
        ),
    ]
    return dashboard(
        "hpcscope-team", "hpcscope — team (account)", ["gpu", "chargeback"], [ACCOUNT], panels
    )
