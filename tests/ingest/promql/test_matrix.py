"""query_range JSON -> GPU_SAMPLE_SCHEMA: the same rows as the page converter, bad answers typed.

The equivalence property: a dcgm-exporter page scraped at a few instants, written as the
matrix a Prometheus holding those scrapes returns, converts to exactly the rows that
:func:`hpcscope.ingest.exporters.dcgm.dcgm_page_to_samples` makes of the pages themselves.
"""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.exporters.dcgm import dcgm_page_to_samples
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.ingest.promql import (
    PromqlResponseError,
    dcgm_matrix_to_samples,
    dcgm_series_selector,
)
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from tests.support.dcgm_pages import render_dcgm_page

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SOURCE = "http://prom:9090/api/v1/query_range"


def _matrix(pages: list[tuple[datetime, str]], node: str) -> dict[str, Any]:
    """What a Prometheus that scraped ``pages`` (with target label ``node``) answers."""
    series: dict[tuple[tuple[str, str], ...], list[list[Any]]] = {}
    for ts, text in pages:
        parser = ExpositionParser()
        page = parser.parse(text, source="page")
        for sid, value in zip(page.series_ids, page.values, strict=True):
            one = parser.series[sid]
            key = (("__name__", one.name), *one.labels, ("node", node))
            series.setdefault(key, []).append([ts.timestamp(), repr(value)])
    result = [{"metric": dict(key), "values": values} for key, values in series.items()]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _converted(pages: list[tuple[datetime, str]], node: str) -> pa.Table:
    tables = []
    for ts, text in pages:
        parser = ExpositionParser()
        page = parser.parse(text, source="page")
        tables.append(dcgm_page_to_samples(page, parser.series, ts=ts, node=node).table)
    keys = [("ts", "ascending"), ("node", "ascending"), ("gpu", "ascending")]
    return pa.concat_tables(tables).sort_by([*keys, ("job_id", "ascending")])


@given(
    seed=st.integers(0, 2**32 - 1),
    scrapes=st.integers(1, 4),
    gpus=st.integers(1, 4),
    shared=st.booleans(),
)
def test_a_matrix_converts_to_the_rows_of_the_pages(
    seed: int, scrapes: int, gpus: int, shared: bool
) -> None:
    rng = random.Random(seed)
    jobs = {
        str(g): ["4410001", "4410002"] if shared and g == 0 else [f"44{g}"] for g in range(gpus)
    }
    pages = [
        (
            START + timedelta(seconds=15 * i, milliseconds=rng.randrange(1000)),
            render_dcgm_page("gpu07", rng=rng, gpus=gpus, jobs=jobs),
        )
        for i in range(scrapes)
    ]
    body = json.dumps(_matrix(pages, "gpu07"))
    table = dcgm_matrix_to_samples(body, source=SOURCE)
    assert table.schema == GPU_SAMPLE_SCHEMA
    expected = _converted(pages, "gpu07")
    got = table.sort_by(
        [("ts", "ascending"), ("node", "ascending"), ("gpu", "ascending"), ("job_id", "ascending")]
    )
    assert got.to_pylist() == expected.to_pylist()


def test_values_are_in_base_units_and_blanks_and_nan_are_dropped() -> None:
    labels = {"gpu": "1", "hostname": "gpu03", "hpc_job": "77", "GPU_I_ID": "2"}
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {
                        "metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels},
                        "values": [[1772366400, "87"], [1772366401, "NaN"]],
                    },
                    {
                        "metric": {"__name__": "DCGM_FI_DEV_FB_USED", **labels},
                        "values": [[1772366400, "2"], [1772366401, str(0x7FFFFFF0)]],
                    },
                    {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL"}, "values": [[1, "5"]]},
                    {"metric": {"__name__": "up", **labels}, "values": [[1772366400, "1"]]},
                ],
            },
        }
    )
    rows = dcgm_matrix_to_samples(body, source=SOURCE).to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert (row["node"], row["gpu"], row["gpu_instance_id"], row["job_id"]) == ("gpu03", 1, 2, "77")
    assert row["ts"] == datetime(2026, 3, 1, 12, 0, 0)
    assert row["reported_util_ratio"] == pytest.approx(0.87)
    assert row["fb_used_bytes"] == 2 * 2**20


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"status": "error", "errorType": "bad_data", "error": "parse error"}', "status"),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": []}}',
            "data.resultType",
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": '
            '{"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "x", "node": "n"}, "values": []}]}}',
            "data.result[0].metric.gpu",
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": '
            '{"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "node": "n"}, "values": [[1]]}]}}',
            "data.result[0].values[0]",
        ),
    ],
)
def test_bad_answers_name_the_source_and_the_culprit(body: str, field: str) -> None:
    with pytest.raises(PromqlResponseError) as caught:
        dcgm_matrix_to_samples(body, source=SOURCE)
    assert caught.value.source == SOURCE
    assert caught.value.field == field


def test_not_json_has_its_position() -> None:
    with pytest.raises(PromqlResponseError) as caught:
        dcgm_matrix_to_samples('{"status":\n oops', source=SOURCE)
    assert (caught.value.line, caught.value.source) == (2, SOURCE)


PRINTABLE = st.characters(min_codepoint=0x20, blacklist_categories=("Cs", "Cc"))


@given(st.lists(st.text(PRINTABLE, min_size=1, max_size=12), min_size=1, max_size=5))
def test_job_ids_are_matched_literally(job_ids: list[str]) -> None:
    selector = dcgm_series_selector(job_ids)
    quoted = selector.split("hpc_job=~", 1)[1].removesuffix("}")
    pattern = json.loads(quoted)  # printable: a PromQL double-quoted string is JSON here
    for job in job_ids:
        assert re.fullmatch(pattern, job)
    assert not re.fullmatch(pattern, job_ids[0] + "x") or (job_ids[0] + "x") in job_ids


def test_control_characters_are_go_escapes() -> None:
    assert dcgm_series_selector(["a\nb"]).endswith('hpc_job=~"a\\x0ab"}')
