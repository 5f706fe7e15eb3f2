"""The cluster dashboard: every GPU of the selected nodes, with or without a job."""

from __future__ import annotations

from typing import Any

from scripts.grafana.panels import NODE, dashboard, panel, reported_vs_real


def cluster_dashboard() -> dict[str, Any]:
    """Every GPU of the selected nodes, with or without a job."""
    node = '{node=~"$node"}'
    weighted = (
        "sum(node:{m}{s} * on (node) node:DCGM_FI_PROF_SM_ACTIVE:count) / "
        "sum(node:DCGM_FI_PROF_SM_ACTIVE:count{s})"
    )
    panels = [
        panel(
            "stat",
            1,
            "GPUs, and GPUs in a job",
            "GPUs that report to dcgm-exporter on the selected nodes, and those a Slurm job "
            "holds (hpc_job set by the prolog).",
            [
                (f"sum(node:DCGM_FI_PROF_SM_ACTIVE:count{node})", "GPUs"),
                (f"sum(node:DCGM_FI_PROF_SM_ACTIVE:count_with_job{node})", "in a job"),
            ],
            unit="none",
            grid=(0, 0, 8, 5),
        ),
        panel(
            "stat",
            2,
            "Cluster: reported utilization vs real efficiency",
            "GPU-weighted 5-minute means. Reported utilization counts any resident kernel (an "
            "NCCL kernel spinning at a barrier included); SM active and tensor active are what "
            "the SMs and the tensor cores really did.",
            [
                (weighted.format(m="DCGM_FI_DEV_GPU_UTIL:ratio_avg5m", s=node), "reported"),
                (weighted.format(m="DCGM_FI_PROF_SM_ACTIVE:avg5m", s=node), "real (SM active)"),
                (weighted.format(m="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:avg5m", s=node), "tensor"),
            ],
            unit="percentunit",
            grid=(8, 0, 16, 5),
            max_value=1,
        ),
        panel(
            "timeseries",
            3,
            "Reported utilization vs real efficiency, per node",
            "Per node, 5-minute means over its GPUs: reported utilization beside SM active and "
            "tensor active. A node reading ~100 % reported and far less SM active is busy "
            "waiting (barriers, input pipeline), not computing.",
            reported_vs_real("node", node, "{{node}}"),
            unit="percentunit",
            grid=(0, 5, 24, 9),
            max_value=1,
        ),
        panel(
            "timeseries",
            4,
            "GPU power per node",
            "Sum of the power draw of the node's GPUs (dcgm-exporter DCGM_FI_DEV_POWER_USAGE; "
            "a GPU shared by two jobs is counted once).",
            [(f"sum by (node) (max by (node, gpu) (DCGM_FI_DEV_POWER_USAGE{node}))", "{{node}}")],
            unit="watt",
            grid=(0, 14, 12, 8),
        ),
        panel(
            "timeseries",
            5,
            "InfiniBand traffic per node",
            "Bytes per second over all HCA ports of the node (node_exporter infiniband "
            "collector), received and transmitted; storage over LNet included.",
            [
                (f"node:node_infiniband_port_data_received_bytes:rate5m{node}", "{{node}} rx"),
                (f"node:node_infiniband_port_data_transmitted_bytes:rate5m{node}", "{{node}} tx"),
            ],
            unit="Bps",
            grid=(12, 14, 12, 8),
        ),
        panel(
            "timeseries",
            6,
            "Hottest GPU per node",
            "Maximum GPU temperature on the node; a thermally throttled GPU slows its whole job.",
            [(f"max by (node) (DCGM_FI_DEV_GPU_TEMP{node})", "{{node}}")],
            unit="celsius",
            grid=(0, 22, 12, 8),
        ),
        panel(
            "timeseries",
            7,
            "GPU memory used per node",
            "Framebuffer memory in use over the node's GPUs (dcgm-exporter DCGM_FI_DEV_FB_USED).",
            [(f"sum by (node) (max by (node, gpu) (DCGM_FI_DEV_FB_USED{node}))", "{{node}}")],
            unit="mbytes",
            grid=(12, 22, 12, 8),
        ),
        panel(
            "table",
            8,
            "Running jobs: reported vs real",
            "Every job with GPUs in dcgm-exporter: GPUs, reported utilization, SM active and "
            "tensor active (5-minute means), and the straggler spread.",
            [
                ("hpc_job:DCGM_FI_PROF_SM_ACTIVE:count", "GPUs"),
                ("hpc_job:DCGM_FI_DEV_GPU_UTIL:ratio_avg5m", "reported"),
                ("hpc_job:DCGM_FI_PROF_SM_ACTIVE:avg5m", "real (SM active)"),
                ("hpc_job:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:avg5m", "tensor active"),
                ("hpc_job:DCGM_FI_PROF_SM_ACTIVE:spread5m", "straggler spread"),
            ],
            unit="none",
            grid=(0, 30, 16, 9),
        ),
        panel(
            "timeseries",
            9,
            "Collector health",
            "1 when hpcscope's last scrape of the target succeeded (hpcscope's /metrics).",
            [("hpcscope_scrape_up", "{{exporter}} {{node}}")],
            unit="none",
            grid=(16, 30, 8, 9),
            max_value=1,
        ),
    ]
    return dashboard("hpcscope-cluster", "hpcscope — cluster", ["gpu"], [NODE], panels)
