from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.dcgm_fields import FIELDS_BY_EXPORTED_NAME, is_blank
from hpcscope.ingest.exporters.dcgm import (
    PLATFORM_JOB_IDS,
    DcgmConversion,
    DcgmConverter,
    dcgm_page_to_samples,
    readings_table,
    samples_table,
)
from hpcscope.ingest.exposition.parser import ExpositionParser, parse_exposition
from hpcscope.model.schemas import GPU_METRICS, GPU_SAMPLE_SCHEMA
from tests.support.dcgm_pages import H100_FIELDS, render_dcgm_page
from tests.support.paths import FIXTURES

DATADOG = FIXTURES / "dcgm" / "metrics_dcgm-exporter_datadog-integrations-core_fixture.txt"
TS = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
MIB = 2**20
# A row of gpu_samples by node, gpu, GPU instance and job
RowKey = tuple[str, int, int | None, str | None]


def _convert(text: str, *, node: str | None = None, ts: datetime = TS) -> DcgmConversion:
    parser = ExpositionParser()
    page = parser.parse(text, source="http://gpu01:9400/metrics")
    assert page.errors == []
    return dcgm_page_to_samples(page, parser.series, ts=ts, node=node)


def _rows(table: pa.Table) -> dict[RowKey, dict[str, object]]:
    return {
        (row["node"], row["gpu"], row["gpu_instance_id"], row["job_id"]): row
        for row in table.to_pylist()
    }


def test_real_datadog_page_in_base_units() -> None:
    result = _convert(DATADOG.read_text())
    assert result.table.schema.equals(GPU_SAMPLE_SCHEMA)
    rows = _rows(result.table)
    assert set(rows) == {
        ("424773df46e0", 0, None, None),
        ("551bdf382151", 0, None, None),
        ("ip-11111", 0, None, None),
    }
    t4 = rows[("424773df46e0", 0, None, None)]
    assert t4["ts"] == datetime(2026, 3, 1, 12, 0, 0, 250000)
    assert t4["sm_clock_hertz"] == 300e6  # 300 MHz
    assert t4["gpu_temperature_celsius"] == 25.0
    assert t4["power_watts"] == 8.969  # %f: 8.969000 W
    assert t4["energy_joules"] == pytest.approx(128996.013)  # 128996013 mJ
    assert t4["reported_util_ratio"] == 0.0
    assert t4["fb_free_bytes"] == 15109 * MIB
    assert t4["fb_used_bytes"] == 0.0
    assert t4["xid_last"] == 0
    assert t4["sm_active_ratio"] is None  # not exported by this host
    assert rows[("551bdf382151", 0, None, None)]["clock_throttle_reasons"] == 1
    assert rows[("ip-11111", 0, None, None)]["dram_active_ratio"] == 3e-06
    assert result.hostnames == {"424773df46e0", "551bdf382151", "ip-11111"}
    # The unlabeled placeholder series after "# NOTE ... dummy values" have no gpu label.
    assert result.unattributed == 7
    assert {"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_PSTATE", "DCGM_FI_DEV_FB_USED_PERCENT"} <= (
        result.unknown_fields
    )
    assert "DCGM_FI_DEV_SM_CLOCK" not in result.unknown_fields
    assert result.dropped_blank == 0
    assert result.errors == ()


def test_node_argument_names_the_rows() -> None:
    text = render_dcgm_page("node-from-label", rng=random.Random(1), gpus=2)
    result = _convert(text, node="gpu07")
    assert result.table.column("node").to_pylist() == ["gpu07", "gpu07"]
    assert result.hostnames == {"node-from-label"}


def test_hpc_job_copies_make_one_row_per_job() -> None:
    jobs = {"0": ["job1-1", "job2-1"], "1": [""], "2": ["0"], "3": ["4242"]}
    text = render_dcgm_page("gpu01", rng=random.Random(2), gpus=5, jobs=jobs)
    result = _convert(text)
    rows = _rows(result.table)
    assert list(rows) == [
        ("gpu01", 0, None, "job1-1"),
        ("gpu01", 0, None, "job2-1"),
        ("gpu01", 1, None, None),
        ("gpu01", 2, None, None),
        ("gpu01", 3, None, "4242"),
        ("gpu01", 4, None, None),
    ]
    shared = [rows[("gpu01", 0, None, job)] for job in ("job1-1", "job2-1")]
    metrics = [metric.column for metric in GPU_METRICS]
    assert {name: shared[0][name] for name in metrics} == {
        name: shared[1][name] for name in metrics
    }


def test_mig_instances_are_rows_of_their_own() -> None:
    mig = {1: [(7, "1g.10gb"), (8, "3g.40gb")]}
    jobs = {"1.7": ["555"], "1": ["556"]}
    text = render_dcgm_page("gpu01", rng=random.Random(3), gpus=2, mig=mig, jobs=jobs)
    rows = _rows(_convert(text).table)
    assert list(rows) == [
        ("gpu01", 0, None, None),
        ("gpu01", 1, None, "556"),  # device-level fields of the MIG-enabled GPU
        ("gpu01", 1, 7, "555"),
        ("gpu01", 1, 8, None),
    ]
    device, instance = rows[("gpu01", 1, None, "556")], rows[("gpu01", 1, 7, "555")]
    assert device["power_watts"] is not None and device["sm_active_ratio"] is None
    assert device["reported_util_ratio"] is None  # GPU_UTIL is not supported on MIG
    assert instance["sm_active_ratio"] is not None and instance["power_watts"] is None


BLANK_PAGE = """\
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="n"} 9223372036854775794
DCGM_FI_DEV_GPU_TEMP{gpu="1",hostname="n"} 2147483632
DCGM_FI_DEV_GPU_TEMP{gpu="2",hostname="n"} 41
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",hostname="n"} 140737488355328.000000
DCGM_FI_DEV_POWER_USAGE{gpu="1",hostname="n"} 140737488355331.000000
DCGM_FI_DEV_POWER_USAGE{gpu="2",hostname="n"} 2147483632.000000
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",hostname="n"} 140737488355329
"""


def test_dcgm_blank_sentinels_are_dropped_and_counted() -> None:
    result = _convert(BLANK_PAGE)
    rows = _rows(result.table)
    assert result.dropped_blank == 4
    assert rows[("n", 0, None, None)]["gpu_temperature_celsius"] is None
    assert rows[("n", 0, None, None)]["power_watts"] is None
    assert ("n", 1, None, None) not in rows  # nothing but blanks: no row, as for a gap
    assert rows[("n", 2, None, None)]["gpu_temperature_celsius"] == 41.0
    # A float field at an int32 sentinel's value and an int64 counter above 2**47 are data.
    assert rows[("n", 2, None, None)]["power_watts"] == 2147483632.0
    assert rows[("n", 0, None, None)]["energy_joules"] == 140737488355.329


def test_blank_rule_per_field_type() -> None:
    assert is_blank(2.0**47, "float") and not is_blank(2.0**47 - 1, "float")
    assert is_blank(float(0x7FFFFFFFFFFFFFF0), "int") and is_blank(2147483635.0, "int")
    assert not is_blank(2147483636.0, "int") and not is_blank(2.0**50, "int")


def test_legacy_namespace_and_renamed_fields() -> None:
    text = (
        "# TYPE dcgm_gpu_utilization gauge\n"
        'dcgm_gpu_utilization{gpu="0",uuid="GPU-1",hostname="n"} 87\n'
        'dcgm_fi_prof_sm_active{gpu="0",uuid="GPU-1",hostname="n"} 0.19\n'
        'dcgm_fb_used{gpu="0",uuid="GPU-1",hostname="n"} 2\n'
        'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",UUID="GPU-1",hostname="n"} 4\n'
    )
    [row] = _convert(text).table.to_pylist()
    assert row["reported_util_ratio"] == 0.87
    assert row["sm_active_ratio"] == 0.19
    assert row["fb_used_bytes"] == 2 * MIB
    assert row["clock_throttle_reasons"] == 4


def test_series_that_fit_no_gpu_row() -> None:
    text = (
        'DCGM_FI_PROF_NVLINK_TX_BYTES{nvlink="0",gpu="0",hostname="n"} 5\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="zero",hostname="n"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="2",hostname="n"} 41\n'
    )
    result = _convert(text)
    assert [row["gpu"] for row in result.table.to_pylist()] == [2]
    assert result.unattributed == 3  # link entity, bad gpu label, no host and no node
    [error] = result.errors
    assert "gpu='zero'" in error.message and error.source == "http://gpu01:9400/metrics"
    assert error.field == "DCGM_FI_DEV_GPU_TEMP"
    assert _convert(text, node="gpu09").table.column("gpu").to_pylist() == [1, 2]


def test_empty_page_gives_an_empty_table_of_the_schema() -> None:
    result = _convert("")
    assert result.rows == 0 and result.table.schema.equals(GPU_SAMPLE_SCHEMA)


def test_timestamps_are_utc_microseconds() -> None:
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="n"} 41\n'
    plus_two = datetime(2026, 3, 1, 14, 0, 0, 250000, tzinfo=timezone(timedelta(hours=2)))
    naive = datetime(2026, 3, 1, 12, 0, 0, 250000)
    for ts in (TS, plus_two, naive):
        [row] = _convert(text, ts=ts).table.to_pylist()
        assert row["ts"] == naive


def test_converter_reuses_decisions_and_survives_compaction() -> None:
    rng = random.Random(4)
    parser = ExpositionParser(compact_above=500)
    converter = DcgmConverter()
    for job in range(12):
        text = render_dcgm_page(
            "gpu01", rng=rng, gpus=8, jobs={str(g): [f"j{job}"] for g in range(8)}
        )
        page = parser.parse(text, source="t")
        cached = converter.convert(page, ts=TS)
        fresh = dcgm_page_to_samples(page, page.series, ts=TS)
        assert cached.table.equals(fresh.table)
        assert cached.table.column("job_id").to_pylist() == [f"j{job}"] * 8
    assert parser.generation > 0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    gpus=st.integers(min_value=1, max_value=8),
    jobs=st.dictionaries(
        st.integers(min_value=0, max_value=7).map(str),
        st.lists(
            st.sampled_from(["", "0", "11", "12", "job-a"]), min_size=1, max_size=3, unique=True
        ),
    ),
    mig=st.dictionaries(
        st.integers(min_value=0, max_value=7),
        st.lists(st.integers(min_value=1, max_value=14), min_size=1, max_size=3, unique=True),
        max_size=2,
    ),
    host_label=st.sampled_from(["hostname", "Hostname"]),
)
def test_rows_equal_the_samples_they_come_from(
    seed: int,
    gpus: int,
    jobs: dict[str, list[str]],
    mig: dict[int, list[int]],
    host_label: str,
) -> None:
    mig_instances = {gpu: [(i, "1g.10gb") for i in ids] for gpu, ids in mig.items()}
    text = render_dcgm_page(
        "gpu01",
        rng=random.Random(seed),
        gpus=gpus,
        jobs=jobs,
        mig=mig_instances,
        host_label=host_label,
    )
    column_of = {metric.source_field: metric.column for metric in GPU_METRICS}
    per_gpu: dict[tuple[str, int, int | None], dict[str, float]] = {}
    jobs_of: dict[tuple[str, int, int | None], set[str]] = {}
    samples, _ = parse_exposition(text)
    for name, labels, value, _ts in samples:
        field = FIELDS_BY_EXPORTED_NAME[name]
        if field.name not in column_of:
            continue
        job = labels.get("hpc_job")
        gpu_key = (
            "gpu01",
            int(labels["gpu"]),
            int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None,
        )
        per_gpu.setdefault(gpu_key, {})[column_of[field.name]] = value * field.factor
        if job not in (None, "", "0"):
            jobs_of.setdefault(gpu_key, set()).add(job)
    # one row per GPU and job: the hpc_job copies carry the same counters, and a copy with a
    # no-job label next to a job's copy is the same GPU held by that job
    expected: dict[RowKey, dict[str, float]] = {
        (*gpu_key, job): columns
        for gpu_key, columns in per_gpu.items()
        for job in _sorted_or_none(jobs_of.get(gpu_key, set()))
    }
    conversion = _convert(text)
    readings = readings_table([conversion])
    assert readings.num_rows == conversion.gpu_rows == len(per_gpu)
    assert {
        (row["node"], row["gpu"], row["gpu_instance_id"]): sorted(row[PLATFORM_JOB_IDS])
        for row in readings.to_pylist()
    } == {gpu_key: sorted(jobs_of.get(gpu_key, set())) for gpu_key in per_gpu}
    rows = _rows(conversion.table)
    assert set(rows) == set(expected)
    for key, columns in expected.items():
        for column in (metric.column for metric in GPU_METRICS):
            got = rows[key][column]
            if column in columns:
                assert got == columns[column], (key, column)
            else:
                assert got is None, (key, column)


def _sorted_or_none(jobs: set[str]) -> list[str | None]:
    return [*sorted(jobs)] if jobs else [None]


def test_generated_fields_are_all_known() -> None:
    assert all(spec.name in FIELDS_BY_EXPORTED_NAME for spec in H100_FIELDS)


def test_one_table_for_many_pages_equals_the_tables_of_each() -> None:
    rng = random.Random(5)
    converters = [DcgmConverter() for _ in range(3)]
    parsers = [ExpositionParser() for _ in range(3)]
    conversions = []
    for index, (parser, converter) in enumerate(zip(parsers, converters, strict=True)):
        node = f"gpu{index:02d}"
        text = render_dcgm_page(node, rng=rng, gpus=2 + index, jobs={"0": ["1", "2"]})
        page = parser.parse(text, source=node)
        conversions.append(converter.convert(page, ts=TS + timedelta(seconds=index), node=node))
    conversions.append(_convert(""))  # an empty page takes no part
    combined = samples_table(conversions)
    assert combined.equals(pa.concat_tables([c.table for c in conversions]).combine_chunks())
    assert combined.num_rows == sum(c.rows for c in conversions) == 3 + 4 + 5
    assert combined.column("ts").to_pylist()[-1] == datetime(2026, 3, 1, 12, 0, 2, 250000)
    assert samples_table([]).schema.equals(GPU_SAMPLE_SCHEMA)


def test_the_last_sample_of_a_cell_wins_and_plans_follow_the_node() -> None:
    text = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="a"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="b"} 41\n'
    )
    parser = ExpositionParser()
    page = parser.parse(text, source="t")
    converter = DcgmConverter()
    by_host = converter.convert(page, ts=TS)
    assert by_host.table.column("gpu_temperature_celsius").to_pylist() == [40.0, 41.0]
    one_node = converter.convert(page, ts=TS, node="gpu01")
    assert one_node.table.to_pylist()[0]["gpu_temperature_celsius"] == 41.0
    assert one_node.hostnames == {"a", "b"}
    assert converter.convert(page, ts=TS).rows == 2
