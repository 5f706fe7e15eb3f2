"""The DCGM unit table, the legacy names, and hpcscope's own counters CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hpcscope.ingest.dcgm_fields import (
    COLUMN_OF_FIELD,
    DCGM_FIELDS,
    FIELDS_BY_EXPORTED_NAME,
    FIELDS_BY_NAME,
)
from hpcscope.model.schemas import GPU_METRICS
from tests.support.paths import FIXTURES, REPO_ROOT

COUNTERS = REPO_ROOT / "deploy" / "dcgm-exporter" / "hpcscope-counters.csv"
PROMETHEUS_TYPES = {"gauge", "counter", "label"}


def _records(path: Path) -> list[list[str]]:
    """Read a counters CSV the way dcgm-exporter does (Go encoding/csv, Comment='#', trim)."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    records = [[cell.strip(" ") for cell in row] for row in csv.reader(lines) if row]
    for row in records:
        assert len(row) == 3, f"{path.name}: {row} has {len(row)} fields, dcgm-exporter needs 3"
    return records


def test_every_stored_column_has_a_field_with_its_unit() -> None:
    for metric in GPU_METRICS:
        field = FIELDS_BY_NAME[metric.source_field]
        assert COLUMN_OF_FIELD[field.name] == metric.column
    # The conversions telemetry.md §1 asks for, in one place.
    factors = {field.name: field.factor for field in DCGM_FIELDS}
    assert factors["DCGM_FI_DEV_GPU_UTIL"] == 0.01
    assert factors["DCGM_FI_DEV_MEM_COPY_UTIL"] == 0.01
    assert factors["DCGM_FI_DEV_FB_USED"] == factors["DCGM_FI_DEV_FB_FREE"] == 1048576.0
    assert factors["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 0.001
    assert factors["DCGM_FI_DEV_SM_CLOCK"] == factors["DCGM_FI_DEV_MEM_CLOCK"] == 1e6
    assert factors["DCGM_FI_PROF_SM_ACTIVE"] == factors["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == 1.0
    assert factors["DCGM_FI_PROF_PCIE_TX_BYTES"] == factors["DCGM_FI_PROF_NVLINK_RX_BYTES"] == 1.0
    assert FIELDS_BY_NAME["DCGM_FI_DEV_POWER_USAGE"].value_type == "float"
    assert FIELDS_BY_NAME["DCGM_FI_DEV_XID_ERRORS"].value_type == "int"


def test_names_are_unique() -> None:
    names = [field.name for field in DCGM_FIELDS]
    legacy = [field.legacy_name for field in DCGM_FIELDS if field.legacy_name]
    assert len(set(names)) == len(names)
    assert len(set(legacy)) == len(legacy)


def test_every_legacy_name_of_the_1x_compatibility_csv_is_known() -> None:
    text = (FIXTURES / "dcgm" / "dcgm-exporter_1.x-compatibility-metrics.csv").read_text()
    names = set()
    for line in text.splitlines():
        candidate = line.lstrip("# ").split(",")[0].strip()
        if candidate.startswith("dcgm_"):
            names.add(candidate)
    assert len(names) >= 30
    assert names <= set(FIELDS_BY_EXPORTED_NAME), names - set(FIELDS_BY_EXPORTED_NAME)


def test_hpcscope_counters_enable_every_stored_field_and_health() -> None:
    records = _records(COUNTERS)
    enabled = {row[0] for row in records}
    assert len(enabled) == len(records), "a field is listed twice"
    assert {metric.source_field for metric in GPU_METRICS} <= enabled
    assert {
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    } <= enabled
    for name, prom_type, help_text in records:
        assert prom_type in PROMETHEUS_TYPES, name
        assert help_text, name
        assert name.startswith("DCGM_EXP_") or name in FIELDS_BY_NAME or prom_type == "label", name


@pytest.mark.parametrize("path", [FIXTURES / "dcgm" / "default-counters.csv", COUNTERS])
def test_counters_files_read_like_dcgm_exporter_reads_them(path: Path) -> None:
    assert _records(path)


def test_the_default_counters_miss_what_we_need() -> None:
    """Why we ship our own file: the upstream default leaves real efficiency out."""
    enabled = {row[0] for row in _records(FIXTURES / "dcgm" / "default-counters.csv")}
    assert "DCGM_FI_PROF_SM_ACTIVE" not in enabled
    assert "DCGM_FI_PROF_SM_OCCUPANCY" not in enabled
