"""Arrow schemas of the tables hpcscope stores, with units in every column name.

Conventions (house style): ``ts`` is UTC with microsecond precision; ratios are 0-1, never
percent; bytes, watts, joules, celsius, hertz are base units. Ingest converts exporter units
(MiB, mJ, %, MHz) once; nothing downstream converts again.

Each metric column also has a :class:`MetricColumn` descriptor: what it measures and its unit,
so every number shown to a user can say both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us")


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """A stored metric: its column, unit, what it measures, and the source field."""

    column: str
    unit: str
    description: str
    source_field: str


GPU_METRICS: tuple[MetricColumn, ...] = (
    MetricColumn(
        "reported_util_ratio",
        "ratio",
        "Reported utilization: share of time at least one kernel was resident "
        "(counts a spinning NCCL kernel as busy)",
        "DCGM_FI_DEV_GPU_UTIL",
    ),
    MetricColumn(
        "sm_active_ratio",
        "ratio",
        "Real efficiency: share of SM cycles with at least one warp resident, "
        "averaged over all SMs",
        "DCGM_FI_PROF_SM_ACTIVE",
    ),
    MetricColumn(
        "sm_occupancy_ratio",
        "ratio",
        "Resident warps over the SMs' maximum",
        "DCGM_FI_PROF_SM_OCCUPANCY",
    ),
    MetricColumn(
        "tensor_active_ratio",
        "ratio",
        "Tensor (HMMA) pipe active: the closest hardware proxy for MFU",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ),
    MetricColumn(
        "dram_active_ratio",
        "ratio",
        "HBM interface busy (memory bandwidth used)",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ),
    MetricColumn(
        "gr_engine_active_ratio",
        "ratio",
        "Graphics/compute engine active",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ),
    MetricColumn("fb_used_bytes", "bytes", "Framebuffer memory used", "DCGM_FI_DEV_FB_USED"),
    MetricColumn("fb_free_bytes", "bytes", "Framebuffer memory free", "DCGM_FI_DEV_FB_FREE"),
    MetricColumn("power_watts", "watts", "Power draw", "DCGM_FI_DEV_POWER_USAGE"),
    MetricColumn(
        "energy_joules",
        "joules",
        "Energy consumed since the driver loaded (counter)",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    ),
    MetricColumn(
        "gpu_temperature_celsius", "celsius", "GPU die temperature", "DCGM_FI_DEV_GPU_TEMP"
    ),
    MetricColumn(
        "memory_temperature_celsius", "celsius", "HBM temperature", "DCGM_FI_DEV_MEMORY_TEMP"
    ),
    MetricColumn("sm_clock_hertz", "hertz", "SM clock", "DCGM_FI_DEV_SM_CLOCK"),
    MetricColumn(
        "clock_throttle_reasons",
        "bitmask",
        "Clock event reasons (power cap, thermal, hardware slowdown...)",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ),
    MetricColumn(
        "xid_last",
        "code",
        "Value of the last Xid error (a code, not a count)",
        "DCGM_FI_DEV_XID_ERRORS",
    ),
    MetricColumn(
        "pcie_tx_bytes_per_second", "bytes/s", "PCIe transmit rate", "DCGM_FI_PROF_PCIE_TX_BYTES"
    ),
    MetricColumn(
        "pcie_rx_bytes_per_second", "bytes/s", "PCIe receive rate", "DCGM_FI_PROF_PCIE_RX_BYTES"
    ),
    MetricColumn(
        "nvlink_tx_bytes_per_second",
        "bytes/s",
        "NVLink transmit rate",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
    ),
    MetricColumn(
        "nvlink_rx_bytes_per_second",
        "bytes/s",
        "NVLink receive rate",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ),
)

_INTEGER_COLUMNS = {"clock_throttle_reasons", "xid_last"}

GPU_SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("job_id", pa.string()),
        *[
            pa.field(m.column, pa.int64() if m.column in _INTEGER_COLUMNS else pa.float64())
            for m in GPU_METRICS
        ],
    ]
)
"""One row per GPU (or MIG instance) per scrape per attributed job.

``job_id`` is null when no job holds the GPU. A GPU shared by two jobs yields two rows with the
same counters, as dcgm-exporter's job mapping does."""

GPU_READING_SCHEMA = pa.schema(
    [*GPU_SAMPLE_SCHEMA, pa.field("shared_job_ids", pa.list_(pa.string()))]
)
"""One stored row per GPU (or MIG instance) per scrape (``gpu_readings``): ``job_id`` is its
job (null: none), ``shared_job_ids`` the further jobs of a shared GPU (null when there are
none). The ``gpu_samples`` view shows it as GPU_SAMPLE_SCHEMA rows, one per job."""

SCRAPE_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("exporter", pa.string(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("duration_seconds", pa.float64(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),
        pa.field("rejected_lines", pa.int64(), nullable=False),
        pa.field("error", pa.string()),
    ]
)
"""One row per scrape attempt: the collector's own health, and the evidence for gaps."""

GAP_SCHEMA = pa.schema(
    [
        pa.field("target", pa.string(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("start_ts", TS, nullable=False),
        pa.field("end_ts", TS, nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)
"""A window in which a target produced no usable samples. Gaps are data: an analysis must not
read a missing window as an idle GPU."""

JOB_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("cluster", pa.string()),
        pa.field("name", pa.string()),
        pa.field("user", pa.string()),
        pa.field("account", pa.string()),
        pa.field("partition", pa.string()),
        pa.field("qos", pa.string()),
        pa.field("state", pa.string()),
        pa.field("exit_code", pa.int32()),
        pa.field("submit_time", TS),
        pa.field("eligible_time", TS),
        pa.field("start_time", TS),
        pa.field("end_time", TS),
        pa.field("time_limit_seconds", pa.int64()),
        pa.field("gpus", pa.int32()),
        pa.field("nodes", pa.string()),
        pa.field("source", pa.string(), nullable=False),
    ]
)
"""Scheduler records of jobs, whatever format they came from (slurmrestd, sacct, prolog)."""

JOB_ALLOCATION_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("start_time", TS, nullable=False),
        pa.field("end_time", TS),
    ]
)
"""Which GPUs a job held and when, from the platform's own mapping (prolog/epilog)."""

ACCOUNT_MEMBERSHIP_SCHEMA = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("account", pa.string(), nullable=False),
        pa.field("coordinator", pa.bool_(), nullable=False),
    ]
)
"""Slurm associations: which accounts a user may charge, and which ones they coordinate."""

JOB_ALIAS_SCHEMA = pa.schema(
    [
        pa.field("raw_job_id", pa.string(), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("cluster", pa.string()),
    ]
)
"""Slurm's raw numeric id of an array task or het component -> hpcscope's job id.

``7745162`` -> ``7725337_411``; ``901`` -> ``900+1``. A label, log line or prolog record that
carries the raw id resolves to the same job (see ``docs/golden-path.md``)."""

IB_COUNTER_COLUMNS: tuple[str, ...] = (
    # 64-bit extended PortCounters (node_exporter multiplies the 4-octet data words by 4)
    "port_data_received_bytes_total",
    "port_data_transmitted_bytes_total",
    "port_packets_received_total",
    "port_packets_transmitted_total",
    "unicast_packets_received_total",
    "unicast_packets_transmitted_total",
    "multicast_packets_received_total",
    "multicast_packets_transmitted_total",
    # error and congestion counters
    "port_errors_received_total",
    "port_discards_received_total",
    "port_discards_transmitted_total",
    "port_constraint_errors_received_total",
    "port_constraint_errors_transmitted_total",
    "port_receive_remote_physical_errors_total",
    "port_receive_switch_relay_errors_total",
    "port_transmit_wait_total",
    "link_downed_total",
    "link_error_recovery_total",
    "symbol_error_total",
    "local_link_integrity_errors_total",
    "excessive_buffer_overrun_errors_total",
    "vl15_dropped_total",
    # 32-bit legacy PortCounters (saturate at 2**32 - 1)
    "legacy_data_received_bytes_total",
    "legacy_data_transmitted_bytes_total",
    "legacy_packets_received_total",
    "legacy_packets_transmitted_total",
    "legacy_unicast_packets_received_total",
    "legacy_unicast_packets_transmitted_total",
    "legacy_multicast_packets_received_total",
    "legacy_multicast_packets_transmitted_total",
    # mlx5 hw_counters (node_exporter >= 1.11): RDMA operations and transport errors
    "rx_read_requests_total",
    "rx_write_requests_total",
    "rx_atomic_requests_total",
    "req_remote_access_errors_total",
    "resp_remote_access_errors_total",
    "out_of_sequence_packets_received_total",
    "local_ack_timeout_errors_total",
    "out_of_buffer_drops_total",
    "roce_adp_retransmits_total",
    "np_cnp_packets_sent_total",
    "rp_cnp_packets_handled_total",
)
"""Counters of one InfiniBand port, named as node_exporter names them without the
``node_infiniband_`` prefix. Counters, so float64: node_exporter exports floats, and the data
counters (4-octet words x 4) can pass 2**53 only after ~10 years at 400 Gb/s."""

IB_PORT_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),
        pa.field("port", pa.int16(), nullable=False),
        pa.field("hca_type", pa.string()),
        pa.field("firmware_version", pa.string()),
        pa.field("board_id", pa.string()),
        pa.field("state_id", pa.int8()),
        pa.field("physical_state_id", pa.int8()),
        pa.field("rate_bytes_per_second", pa.float64()),
        *[pa.field(column, pa.float64()) for column in IB_COUNTER_COLUMNS],
    ]
)
"""One row per InfiniBand port per scrape of node_exporter's ``infiniband`` collector.

``state_id`` 4 = ACTIVE, ``physical_state_id`` 5 = LinkUp. Counters are stored raw (as read):
rates, reset detection (a counter that goes down was reset: ``perfquery -r``, a reboot, or
tampering) and 32-bit saturation are derived by :mod:`hpcscope.analysis.infiniband`."""

LUSTRE_JOB_STATS_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("server", pa.string(), nullable=False),
        pa.field("target", pa.string()),
        pa.field("component", pa.string()),
        pa.field("job_id_raw", pa.string(), nullable=False),
        pa.field("job_id", pa.string()),
        pa.field("host", pa.string()),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),
        pa.field("samples", pa.float64(), nullable=False),
        pa.field("sum_value", pa.float64()),
        pa.field("min_value", pa.float64()),
        pa.field("max_value", pa.float64()),
        pa.field("start_ts", TS),
    ]
)
"""One row per Lustre job_stats operation per job per target per snapshot (``telemetry.md`` §7).

``ts`` is the entry's ``snapshot_time``: Lustre sets it when the job's counters last changed, so
an idle job read again has the same ``ts`` and is stored once (the store keys rows on
``server, target, job_id_raw, operation, ts``). ``server`` names the Lustre server (OSS/MDS)
whose ``lctl get_param`` output the row came from; ``target`` is the OST/MDT
(``es01a-OST0001``; null for a ``/proc`` file read without one) and ``component`` ``ost`` or
``mdt``. ``job_id_raw`` is the jobid as Lustre wrote it (``SLURM_JOB10:0:es18kxe-co-client``,
``jobid_name`` template); ``job_id`` and ``host`` are extracted from it by the site's pattern
and are null for ids that are not Slurm jobs (``bash:0:host``). Counters are cumulative since
the entry appeared and reset when Lustre drops an idle entry (``job_cleanup_interval``), so
rates come from differences that never go down. ``unit`` is Lustre's (``bytes``, ``usecs``,
``reqs``): ``sum_value`` of a ``usecs`` operation is the total service time in microseconds;
``sum_value``/``min_value``/``max_value`` are null in pre-2.14 files, which count requests only.
``start_ts`` is the 2.14+ ``start_time`` (when the entry was created)."""

JOB_SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("summarised_at", TS, nullable=False),
        pa.field("user", pa.string()),
        pa.field("account", pa.string()),
        pa.field("partition", pa.string()),
        pa.field("state", pa.string()),
        pa.field("exit_code", pa.int32()),
        pa.field("exit_cause", pa.string(), nullable=False),
        pa.field("start_time", TS),
        pa.field("end_time", TS),
        pa.field("elapsed_seconds", pa.float64()),
        pa.field("gpus_allocated", pa.int32()),
        pa.field("gpus_observed", pa.int32(), nullable=False),
        pa.field("reported_util_ratio", pa.float64()),
        pa.field("sm_active_ratio", pa.float64()),
        pa.field("tensor_active_ratio", pa.float64()),
        pa.field("allocated_gpu_seconds", pa.float64()),
        pa.field("observed_gpu_seconds", pa.float64(), nullable=False),
        pa.field("useful_gpu_seconds", pa.float64(), nullable=False),
        pa.field("energy_joules", pa.float64()),
        pa.field("verdict", pa.string(), nullable=False),
        pa.field("first_sample_ts", TS),
        pa.field("last_sample_ts", TS),
        pa.field("phases_json", pa.string()),
        pa.field("straggler_verdict", pa.string()),
    ]
)
"""The kept summary of a finished job, written once (``store/summaries.py``).

``phases_json`` and ``straggler_verdict`` stay null until the traces capability fills them for
jobs whose profiler traces were analysed."""

JOB_GPU_SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("observed_seconds", pa.float64(), nullable=False),
        pa.field("reported_util_ratio", pa.float64()),
        pa.field("sm_active_ratio", pa.float64()),
        pa.field("tensor_active_ratio", pa.float64()),
        pa.field("sm_occupancy_ratio", pa.float64()),
        pa.field("dram_active_ratio", pa.float64()),
        pa.field("power_watts", pa.float64()),
        pa.field("sm_clock_hertz", pa.float64()),
        pa.field("useful_seconds", pa.float64(), nullable=False),
        pa.field("energy_joules", pa.float64()),
        pa.field("max_temperature_celsius", pa.float64()),
        pa.field("throttle_reasons", pa.int64(), nullable=False),
        pa.field("slowdown_share", pa.float64()),
        pa.field("xid", pa.int64()),
        pa.field("max_fb_used_bytes", pa.float64()),
        pa.field("first_ts", TS),
        pa.field("last_ts", TS),
        pa.field("peer_sm_active_ratio", pa.float64()),
        pa.field("verdict", pa.string(), nullable=False),
    ]
)
"""Per GPU of a finished job: the row :func:`hpcscope.analysis.jobs.efficiency.gpu_summary`
computed from its raw samples, kept so that the job report survives raw-sample retention."""

ROLLUP_METRICS: tuple[tuple[str, str], ...] = (
    ("reported_util_ratio", "reported_util_ratio"),
    ("sm_active_ratio", "sm_active_ratio"),
    ("tensor_active_ratio", "tensor_active_ratio"),
    ("sm_clock_hertz", "sm_clock_hertz"),
    ("fb_used_bytes", "fb_used_bytes"),
    ("power_watts", "power_watts"),
)
"""(rollup name, ``gpu_samples`` column) of the metrics kept per minute as min/mean/max/count."""

GPU_ROLLUP_SCHEMA = pa.schema(
    [
        pa.field("minute", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("job_id", pa.string()),
        pa.field("samples", pa.int64(), nullable=False),
        pa.field("first_ts", TS, nullable=False),
        pa.field("last_ts", TS, nullable=False),
        *[
            pa.field(f"{name}_{part}", pa.int64() if part == "count" else pa.float64())
            for name, _ in ROLLUP_METRICS
            for part in ("min", "mean", "max", "count")
        ],
        pa.field("final", pa.bool_(), nullable=False),
    ]
)
"""One minute of one GPU (and job): min/mean/max and the count of known values per metric.

``final`` is set once no later sample can land in the minute (``store/rollups.py``)."""

LUSTRE_CHANGELOG_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("mdt", pa.string(), nullable=False),
        pa.field("record_index", pa.int64(), nullable=False),
        pa.field("record_type", pa.string(), nullable=False),
        pa.field("flags", pa.string()),
        pa.field("target_fid", pa.string()),
        pa.field("parent_fid", pa.string()),
        pa.field("name", pa.string()),
        pa.field("source_fid", pa.string()),
        pa.field("source_parent_fid", pa.string()),
        pa.field("source_name", pa.string()),
        pa.field("job_id_raw", pa.string()),
        pa.field("job_id", pa.string()),
        pa.field("host", pa.string()),
        pa.field("uid", pa.int64()),
        pa.field("gid", pa.int64()),
        pa.field("nid", pa.string()),
        pa.field("path", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),
    ]
)
"""One Lustre MDT changelog record (``lfs changelog <mdt>``, ``security.md`` §2).

``mdt`` and ``record_index`` identify it (the store keeps it once). ``record_type`` is the name
without its number (``CREAT`` for ``01CREAT``); ``target_fid`` ``t=``, ``parent_fid`` ``p=``,
``name`` the entry's name; a rename carries the old entry in ``source_fid`` (``s=``),
``source_parent_fid`` (``sp=``) and ``source_name``. ``job_id_raw`` is ``j=`` as Lustre wrote it
(``jobid_var``/``jobid_name``), ``job_id``/``host`` extracted by the site's pattern; ``uid``,
``gid`` from ``u=``, ``nid`` the client NID. ``path`` is the parent resolved
(``lfs fid2path``) joined with ``name``, null when it could not be resolved."""

GPU_PROCESS_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_uuid", pa.string()),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("process_name", pa.string()),
        pa.field("used_memory_bytes", pa.float64()),
        pa.field("job_id", pa.string()),
    ]
)
"""One compute process NVML lists on a GPU at one read (``nvidia-smi --query-compute-apps``).

``gpu`` is the index of ``gpu_uuid`` on the node; ``job_id`` the Slurm job of the PID from its
``/proc/<pid>/cgroup`` (null outside every job)."""
