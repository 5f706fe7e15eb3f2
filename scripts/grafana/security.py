"""The security dashboard: open alerts, and the raw signals of the PromQL rules."""

from __future__ import annotations

from typing import Any

from scripts.grafana.panels import NO_JOB, NODE, dashboard, panel


def security_dashboard() -> dict[str, Any]:
    """hpcscope's open alerts, and the raw signals of the PromQL-expressible rules."""
    node = '{node=~"$node"}'
    idle = f'{{{NO_JOB}, node=~"$node"}}'
    panels = [
        panel(
            "stat",
            1,
            "Open alerts by severity",
            "Open and acknowledged hpcscope alerts (hpcscope_alerts_open; docs/security.md).",
            [("sum by (severity) (hpcscope_alerts_open)", "{{severity}}")],
            unit="none",
            grid=(0, 0, 12, 5),
        ),
        panel(
            "timeseries",
            2,
            "Open alerts per threat vector",
            "Open hpcscope alerts per vector of the catalog (supply chain, data poisoning, "
            "RDMA blind spot, gradient injection, GPU memory leakage, container escape).",
            [("sum by (vector) (hpcscope_alerts_open)", "{{vector}}")],
            unit="none",
            grid=(12, 0, 12, 8),
        ),
        panel(
            "table",
            3,
            "Security rules firing in Prometheus",
            "Alerts of deploy/prometheus/hpcscope-security.yml (SC-4, GM-1, RD-1, RD-5, RD-6) "
            "that Prometheus holds pending or firing.",
            [('ALERTS{rule_id!=""}', "")],
            unit="none",
            grid=(0, 5, 12, 3),
        ),
        panel(
            "timeseries",
            4,
            "GPU activity with no job (SC-4)",
            "GPUs no Slurm job holds: reported utilization beside SM active and tensor active. "
            "Anything above zero runs outside the scheduler.",
            [
                (
                    f"max by (node, gpu) (DCGM_FI_DEV_GPU_UTIL{idle}) / 100",
                    "{{node}} GPU {{gpu}} reported",
                ),
                (
                    f"max by (node, gpu) (DCGM_FI_PROF_SM_ACTIVE{idle})",
                    "{{node}} GPU {{gpu}} SM active",
                ),
                (
                    f"max by (node, gpu) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{idle})",
                    "{{node}} GPU {{gpu}} tensor",
                ),
            ],
            unit="percentunit",
            grid=(0, 8, 12, 8),
            max_value=1,
        ),
        panel(
            "timeseries",
            5,
            "GPU memory held with no job (GM-1)",
            "Framebuffer memory in use on GPUs no job holds: leftovers of a finished job are "
            "readable by the next one.",
            [(f"max by (node, gpu) (DCGM_FI_DEV_FB_USED{idle})", "{{node}} GPU {{gpu}}")],
            unit="mbytes",
            grid=(12, 8, 12, 8),
        ),
        panel(
            "timeseries",
            6,
            "InfiniBand traffic on nodes with no job (RD-1)",
            "HCA bytes per second on nodes where no GPU is in a job: RDMA traffic there is "
            "invisible to the job accounting.",
            [
                (
                    f"node:node_infiniband_port_data_received_bytes:rate5m{node} unless on (node) "
                    "node:DCGM_FI_PROF_SM_ACTIVE:count_with_job",
                    "{{node}} rx",
                ),
                (
                    f"node:node_infiniband_port_data_transmitted_bytes:rate5m{node} "
                    "unless on (node) node:DCGM_FI_PROF_SM_ACTIVE:count_with_job",
                    "{{node}} tx",
                ),
            ],
            unit="Bps",
            grid=(0, 16, 12, 8),
        ),
        panel(
            "timeseries",
            7,
            "InfiniBand P_Key constraint errors (RD-5)",
            "Packets the HCAs dropped for a partition key they do not hold, per node.",
            [
                (
                    "sum by (node) (increase(node_infiniband_port_constraint_errors_received_total"
                    f"{node}[$__rate_interval]))",
                    "{{node}} received",
                ),
                (
                    "sum by (node) (increase("
                    f"node_infiniband_port_constraint_errors_transmitted_total{node}"
                    "[$__rate_interval]))",
                    "{{node}} transmitted",
                ),
            ],
            unit="none",
            grid=(12, 16, 12, 8),
        ),
        panel(
            "timeseries",
            8,
            "InfiniBand counter resets (RD-6)",
            "Port data counters that went down (perfquery -R clears them and hides traffic).",
            [
                (
                    "sum by (node) (resets("
                    f"node_infiniband_port_data_received_bytes_total{node}[5m]))",
                    "{{node}}",
                )
            ],
            unit="none",
            grid=(0, 24, 12, 8),
        ),
        panel(
            "timeseries",
            9,
            "Last Xid per GPU",
            "dcgm-exporter's last Xid error of each GPU (0: none); 79, 48, 94 and 31 are the "
            "serious ones (docs/efficiency.md).",
            [(f"max by (node, gpu) (DCGM_FI_DEV_XID_ERRORS{node})", "{{node}} GPU {{gpu}}")],
            unit="none",
            grid=(12, 24, 12, 8),
        ),
    ]
    return dashboard("hpcscope-security", "hpcscope — security", ["security"], [NODE], panels)
