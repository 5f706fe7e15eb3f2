"""The one table of DCGM fields hpcscope reads: exported unit, factor to base units, blanks.

telemetry.md §1: units are converted once, here (% -> ratio, MiB -> bytes, mJ -> J,
MHz -> Hz); nothing downstream converts again. ``value_type`` is the DCGM field type
(``dcgm_fields.h``), which decides what a "blank" sentinel looks like: DCGM reports a missing
or unsupported value as a sentinel, not as an absent sample, and older exporters print it.

Field types and units checked against NVIDIA DCGM ``dcgm_fields.h`` / ``DcgmFieldsPopulate...``
(e.g. POWER_USAGE is DCGM_FT_DOUBLE in W, TOTAL_ENERGY_CONSUMPTION DCGM_FT_INT64 in mJ,
PROF_PCIE_TX_BYTES DCGM_FT_INT64 in bytes/s, PROF_SM_ACTIVE DCGM_FT_DOUBLE ratio).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hpcscope.model.schemas import GPU_METRICS

ValueType = Literal["int", "float"]

#: DCGM_FT_INT32_BLANK .. DCGM_FT_INT32_NOT_PERMISSIONED (0x7ffffff0 + 0..3). The exporter
#: compares int64 values with them too (``isInt64Blank`` in dcgm-exporter).
INT32_BLANKS = frozenset(float(0x7FFFFFF0 + offset) for offset in range(4))
#: DCGM_FT_INT64_BLANK = 0x7ffffffffffffff0 (~9.22e18); as a float64 it rounds to 2**63.
INT64_BLANK_AT = float(0x7FFFFFFFFFFFFFF0)
#: DCGM_FT_FP64_BLANK = 140737488355328.0 (2**47); DCGM_FP64_IS_BLANK(v) is ``v >= blank``.
FP64_BLANK_AT = 140737488355328.0


@dataclass(frozen=True, slots=True)
class DcgmField:
    """How one DCGM field is exported and how hpcscope stores it."""

    name: str
    exported_unit: str
    factor: float
    """Multiply the exported value by this to get the stored base unit."""
    value_type: ValueType
    legacy_name: str | None = None
    """The lowercase 1.x name written with ``--use-old-namespace``, if any."""


_PERCENT = 0.01
_MIB = float(2**20)
_MILLI = 0.001
_MEGA = 1e6

DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "%", _PERCENT, "int", "dcgm_gpu_utilization"),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "%", _PERCENT, "int", "dcgm_mem_copy_utilization"),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "%", _PERCENT, "int", "dcgm_enc_utilization"),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "%", _PERCENT, "int", "dcgm_dec_utilization"),
    DcgmField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio", 1.0, "float", "dcgm_fi_prof_gr_engine_active"
    ),
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", "ratio", 1.0, "float", "dcgm_fi_prof_sm_active"),
    DcgmField("DCGM_FI_PROF_SM_OCCUPANCY", "ratio", 1.0, "float", "dcgm_fi_prof_sm_occupancy"),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", 1.0, "float", "dcgm_fi_prof_pipe_tensor_active"
    ),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", "ratio", 1.0, "float", "dcgm_fi_prof_dram_active"),
    DcgmField("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "ratio", 1.0, "float"),
    DcgmField("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "ratio", 1.0, "float"),
    DcgmField("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "ratio", 1.0, "float"),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", "bytes/s", 1.0, "int", "dcgm_fi_prof_pcie_tx_bytes"),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "bytes/s", 1.0, "int", "dcgm_fi_prof_pcie_rx_bytes"),
    DcgmField("DCGM_FI_PROF_NVLINK_TX_BYTES", "bytes/s", 1.0, "int"),
    DcgmField("DCGM_FI_PROF_NVLINK_RX_BYTES", "bytes/s", 1.0, "int"),
    DcgmField("DCGM_FI_DEV_FB_FREE", "MiB", _MIB, "int", "dcgm_fb_free"),
    DcgmField("DCGM_FI_DEV_FB_USED", "MiB", _MIB, "int", "dcgm_fb_used"),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "MiB", _MIB, "int"),
    DcgmField("DCGM_FI_DEV_FB_TOTAL", "MiB", _MIB, "int"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "W", 1.0, "float", "dcgm_power_usage"),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", _MILLI, "int", "dcgm_total_energy_consumption"
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "C", 1.0, "int", "dcgm_gpu_temp"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "C", 1.0, "int", "dcgm_memory_temp"),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "MHz", _MEGA, "int", "dcgm_sm_clock"),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "MHz", _MEGA, "int", "dcgm_memory_clock"),
    DcgmField("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "bitmask", 1.0, "int"),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "code", 1.0, "int", "dcgm_xid_errors"),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "count", 1.0, "int", "dcgm_pcie_replay_counter"),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "count", 1.0, "int", "dcgm_nvlink_bandwidth_total"
    ),
    DcgmField("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "count", 1.0, "int", "dcgm_ecc_sbe_volatile_total"),
    DcgmField("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "count", 1.0, "int", "dcgm_ecc_dbe_volatile_total"),
    DcgmField("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "count", 1.0, "int", "dcgm_ecc_sbe_aggregate_total"),
    DcgmField("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "count", 1.0, "int", "dcgm_ecc_dbe_aggregate_total"),
    DcgmField("DCGM_FI_DEV_RETIRED_SBE", "count", 1.0, "int", "dcgm_retired_pages_sbe"),
    DcgmField("DCGM_FI_DEV_RETIRED_DBE", "count", 1.0, "int", "dcgm_retired_pages_dbe"),
    DcgmField("DCGM_FI_DEV_RETIRED_PENDING", "count", 1.0, "int", "dcgm_retired_pages_pending"),
    DcgmField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "count", 1.0, "int"),
    DcgmField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "count", 1.0, "int"),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "bool", 1.0, "int"),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "count",
        1.0,
        "int",
        "dcgm_nvlink_flit_crc_error_count_total",
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "count",
        1.0,
        "int",
        "dcgm_nvlink_data_crc_error_count_total",
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "count",
        1.0,
        "int",
        "dcgm_nvlink_replay_error_count_total",
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "count",
        1.0,
        "int",
        "dcgm_nvlink_recovery_error_count_total",
    ),
    DcgmField("DCGM_FI_DEV_POWER_VIOLATION", "ns", 1e-9, "int", "dcgm_power_violation"),
    DcgmField("DCGM_FI_DEV_THERMAL_VIOLATION", "ns", 1e-9, "int", "dcgm_thermal_violation"),
    DcgmField("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "ns", 1e-9, "int", "dcgm_sync_boost_violation"),
    DcgmField("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "ns", 1e-9, "int", "dcgm_board_limit_violation"),
    DcgmField("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "ns", 1e-9, "int", "dcgm_low_util_violation"),
    DcgmField("DCGM_FI_DEV_RELIABILITY_VIOLATION", "ns", 1e-9, "int", "dcgm_reliability_violation"),
)

#: Other names of the same field: DCGM 3.3 renamed CLOCK_THROTTLE_REASONS (field 112).
ALIASES: dict[str, str] = {
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
}

FIELDS_BY_NAME: dict[str, DcgmField] = {field.name: field for field in DCGM_FIELDS}
FIELDS_BY_EXPORTED_NAME: dict[str, DcgmField] = {
    **FIELDS_BY_NAME,
    **{alias: FIELDS_BY_NAME[name] for alias, name in ALIASES.items()},
    **{field.legacy_name: field for field in DCGM_FIELDS if field.legacy_name},
}
"""Every metric name a dcgm-exporter page may carry for a field: current, renamed, 1.x."""

#: GPU sample column fed by each DCGM field (from the schema's ``source_field``).
COLUMN_OF_FIELD: dict[str, str] = {metric.source_field: metric.column for metric in GPU_METRICS}


def is_blank(value: float, value_type: ValueType) -> bool:
    """True if ``value`` is one of DCGM's blank sentinels for a field of this type."""
    if value_type == "float":
        return value >= FP64_BLANK_AT
    return value >= INT64_BLANK_AT or value in INT32_BLANKS
