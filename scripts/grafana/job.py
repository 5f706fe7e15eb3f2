"""The job dashboard: reported vs real, per GPU, stragglers, useful GPU-hours, I/O."""

from __future__ import annotations

from typing import Any

from scripts.grafana.panels import (
    ACCOUNT,
    HOURS_OVER_RANGE,
    JOB,
    dashboard,
    panel,
    reported_vs_real,
    variable,
)


def job_dashboard() -> dict[str, Any]:
    """One or more jobs: reported vs real, per GPU, stragglers, useful GPU-hours, I/O."""
    job = '{hpc_job=~"$job"}'
    gpus = '{hpc_job=~"$job", node=~"$node"}'
    panels = [
        panel(
            "timeseries",
            1,
            "Reported utilization vs real efficiency, per job",
            "Reported utilization counts any resident kernel (an NCCL kernel spinning at the "
            "barrier included); SM active is what the SMs really did, tensor active what the "
            "tensor cores did (the closest hardware proxy for MFU in BF16/FP16).",
            reported_vs_real("hpc_job", job, "{{hpc_job}}"),
            unit="percentunit",
            grid=(0, 0, 24, 9),
            max_value=1,
        ),
        panel(
            "timeseries",
            2,
            "Per GPU: reported utilization beside SM active",
            "Each GPU of the selected jobs and nodes, as dcgm-exporter reports it.",
            [
                (f"DCGM_FI_DEV_GPU_UTIL{gpus} / 100", "{{node}} GPU {{gpu}} reported"),
                (f"DCGM_FI_PROF_SM_ACTIVE{gpus}", "{{node}} GPU {{gpu}} SM active"),
                (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpus}", "{{node}} GPU {{gpu}} tensor"),
            ],
            unit="percentunit",
            grid=(0, 9, 12, 9),
            max_value=1,
        ),
        panel(
            "timeseries",
            3,
            "Real efficiency per GPU (5-minute mean)",
            "SM active of each GPU; in a synchronous job the straggler is the GPU still "
            "computing while its peers wait for it (the highest line).",
            [(f"hpc_job_node_gpu:DCGM_FI_PROF_SM_ACTIVE:avg5m{gpus}", "{{node}} GPU {{gpu}}")],
            unit="percentunit",
            grid=(12, 9, 12, 9),
            max_value=1,
        ),
        panel(
            "timeseries",
            4,
            "Straggler spread: SM active over the median",
            "The most active GPU's SM active minus the job's median; hpcscope calls it a "
            "straggler past 0.10 (and 20 %) while the peers look busy.",
            [(f"hpc_job:DCGM_FI_PROF_SM_ACTIVE:spread5m{job}", "{{hpc_job}}")],
            unit="percentunit",
            grid=(0, 18, 8, 8),
            max_value=1,
        ),
        panel(
            "timeseries",
            5,
            "Straggler spread: SM clock",
            "Fastest minus slowest SM clock of the job's GPUs (5-minute means): a thermally "
            "throttled GPU runs far below its peers.",
            [(f"hpc_job:DCGM_FI_DEV_SM_CLOCK:spread5m{job} * 1000000", "{{hpc_job}}")],
            unit="hertz",
            grid=(8, 18, 8, 8),
        ),
        panel(
            "table",
            6,
            "Straggler GPUs (hpcscope)",
            "GPUs hpcscope marks as their job's straggler, with the job's user and account "
            "(hpcscope's /metrics).",
            [
                (
                    '(hpcscope_job_gpu_straggler{job_id=~"$job"} == 1) * on (job_id) '
                    "group_left (user, account) hpcscope_job_info",
                    "",
                )
            ],
            unit="none",
            grid=(16, 18, 8, 8),
        ),
        panel(
            "stat",
            7,
            "Useful and observed GPU-hours in the range",
            "Useful = SM active x time summed over the job's GPUs; observed = GPUs x time "
            "(from the recording rules, at the panel's interval). Their ratio is the job's "
            "real efficiency.",
            [
                (
                    HOURS_OVER_RANGE.format(expr=f"hpc_job:DCGM_FI_PROF_SM_ACTIVE:sum_avg1m{job}"),
                    "{{hpc_job}} useful",
                ),
                (
                    HOURS_OVER_RANGE.format(expr=f"hpc_job:DCGM_FI_PROF_SM_ACTIVE:count{job}"),
                    "{{hpc_job}} observed",
                ),
            ],
            unit="h",
            grid=(0, 26, 12, 6),
        ),
        panel(
            "stat",
            8,
            "Useful GPU-hours so far (hpcscope)",
            "hpcscope's running total for each running job since it started "
            "(hpcscope_job_useful_gpu_seconds).",
            [('hpcscope_job_useful_gpu_seconds{job_id=~"$job"} / 3600', "{{job_id}}")],
            unit="h",
            grid=(12, 26, 12, 6),
        ),
        panel(
            "timeseries",
            9,
            "InfiniBand traffic per job",
            "Each node's HCA bytes shared among its jobs by the GPUs each holds there "
            "(node_exporter has no job label); includes storage over LNet.",
            [
                (f"hpc_job:node_infiniband_port_data_received_bytes:rate5m{job}", "{{hpc_job}} rx"),
                (
                    f"hpc_job:node_infiniband_port_data_transmitted_bytes:rate5m{job}",
                    "{{hpc_job}} tx",
                ),
            ],
            unit="Bps",
            grid=(0, 32, 12, 8),
        ),
        panel(
            "timeseries",
            10,
            "GPU power per job",
            "From dcgm-exporter's energy counter (mJ), per job (hpc_job set by the Slurm prolog).",
            [
                (
                    f"sum by (hpc_job) (rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpus}"
                    "[$__rate_interval])) / 1000",
                    "{{hpc_job}}",
                )
            ],
            unit="watt",
            grid=(12, 32, 12, 8),
        ),
        panel(
            "timeseries",
            11,
            "GPU memory used per GPU",
            "Framebuffer memory in use on each GPU of the selected jobs.",
            [(f"DCGM_FI_DEV_FB_USED{gpus}", "{{node}} GPU {{gpu}}")],
            unit="mbytes",
            grid=(0, 40, 12, 8),
        ),
        panel(
            "timeseries",
            12,
            "Lustre throughput per job (hpcscope)",
            "Bytes per second the job read from and wrote to Lustre over the last 5 minutes, "
            "from the servers' job_stats (hpcscope's /metrics; deploy/lustre/README.md).",
            [
                (
                    'hpcscope_job_storage_read_bytes_per_second{job_id=~"$job"}',
                    "{{job_id}} read",
                ),
                (
                    'hpcscope_job_storage_write_bytes_per_second{job_id=~"$job"}',
                    "{{job_id}} write",
                ),
            ],
            unit="Bps",
            grid=(12, 40, 12, 8),
        ),
    ]
    variables = [
        ACCOUNT,
        JOB,
        variable("node", "Node", 'DCGM_FI_DEV_GPU_UTIL{hpc_job=~"$job"}', "node"),
    ]
    return dashboard(
        "hpcscope-job", "hpcscope — job: reported vs real", ["gpu", "slurm"], variables, panels
    )
