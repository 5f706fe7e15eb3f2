from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpcscope.ingest.exposition.parser import (
    ExpositionError,
    ExpositionParser,
    Series,
    parse_exposition,
)
from hpcscope.model.errors import SourceError
from tests.support.exposition_oracle import Sample, assert_same_samples, oracle_samples
from tests.support.paths import FIXTURES

DATADOG = FIXTURES / "dcgm" / "metrics_dcgm-exporter_datadog-integrations-core_fixture.txt"


def _samples(parser: ExpositionParser, text: str | bytes, source: str = "t") -> list[Sample]:
    page = parser.parse(text, source=source)
    return [
        (series.name, series.labels_dict(), value, None if stamp is None else stamp / 1000)
        for series, value, stamp in page.samples()
    ]


def test_real_dcgm_page_matches_prometheus_client() -> None:
    text = DATADOG.read_text()
    samples, errors = parse_exposition(text, source=str(DATADOG))
    assert errors == []
    assert_same_samples(samples, oracle_samples(text))
    assert len(samples) == 38
    first = samples[0]
    assert first[0] == "DCGM_FI_DEV_SM_CLOCK"
    assert first[1]["Hostname"] == "424773df46e0"
    assert first[2] == 300.0
    power = next(sample for sample in samples if sample[0] == "DCGM_FI_DEV_POWER_USAGE")
    assert power[2] == 8.969  # Go %f: 8.969000
    placeholders = [sample for sample in samples if not sample[1]]
    assert {sample[0] for sample in placeholders} >= {
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FAN_SPEED",
    }


def test_real_dcgm_page_metadata() -> None:
    page = ExpositionParser().parse(DATADOG.read_text(), source="fixture")
    assert page.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert page.types["DCGM_FI_DEV_SM_CLOCK"] == "gauge"
    assert page.helps["DCGM_FI_DEV_SM_CLOCK"] == "SM clock frequency (in MHz)."
    assert page.helps["DCGM_FI_DEV_SLOWDOWN_TEMP"] == ""
    assert len(page) == len(page.series_ids) == len(page.timestamps_ms) == 38
    assert page.lines == 116
    assert page.rejected_lines == 0


def test_second_scrape_is_read_from_the_key_cache() -> None:
    text = DATADOG.read_text()
    parser = ExpositionParser()
    first = parser.parse(text, source="t")
    second = parser.parse(text, source="t")
    assert first.new_series == 38
    assert second.new_series == 0
    assert second.series_ids == first.series_ids
    assert second.values == first.values
    assert second.types == first.types and second.helps == first.helps
    changed = text.replace("} 300\n", "} 1410\n").replace("8.969000", "312.5")
    third = parser.parse(changed, source="t")
    assert third.new_series == 0
    assert_same_samples(_samples(parser, changed), oracle_samples(changed))


def test_series_identity_ignores_label_order_and_spacing() -> None:
    parser = ExpositionParser()
    page = parser.parse('a{x="1",y="2"} 1\na{ y = "2" , x="1", } 2\na {x="1",y="2"}3\n', source="t")
    assert page.series_ids == [0, 0, 0]
    assert parser.series == [Series("a", (("x", "1"), ("y", "2")))]
    assert parser.series[0].label("y") == "2"
    assert parser.series[0].label("z") is None


def test_special_values_timestamps_and_escapes() -> None:
    text = (
        'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",empty="",u="ε☃"} NaN\n'
        'm{k="v"} +Inf 1700000000123\n'
        'm{k="w"} -Inf -5\n'
        'm{k="x"}\t1.5e-3\t+7\n'
        "n 1e3\n"
    )
    parser = ExpositionParser()
    for _ in range(2):  # cold, then from the key cache
        samples = _samples(parser, text)
        assert_same_samples(samples, oracle_samples(text))
    assert samples[0][1] == {
        "path": "C:\\dir",
        "quote": 'say "hi"',
        "nl": "a\nb",
        "empty": "",
        "u": "ε☃",
    }
    assert math.isnan(samples[0][2])
    assert samples[1][2:] == (math.inf, 1700000000.123)
    assert samples[2][2:] == (-math.inf, -0.005)
    assert samples[3][2:] == (0.0015, 0.007)


def test_crlf_and_bytes_input() -> None:
    text = DATADOG.read_text()
    crlf = text.replace("\n", "\r\n")
    parser = ExpositionParser()
    assert _samples(parser, crlf.encode()) == _samples(ExpositionParser(), text)
    assert _samples(parser, crlf.encode()) == _samples(ExpositionParser(), text)


def test_invalid_utf8_rejects_that_line_only() -> None:
    page = ExpositionParser().parse(b'a{b="\xff\xfe"} 1\nc 2\n', source="http://n1:9400/metrics")
    assert [(series.name, value) for series, value, _ in page.samples()] == [("c", 2.0)]
    [error] = page.errors
    assert (error.source, error.line, error.column) == ("http://n1:9400/metrics", 1, 6)
    assert "UTF-8" in error.message


GOOD = '# HELP good a good gauge\n# TYPE good gauge\ngood{gpu="0"} 1\n'
AFTER = 'after{gpu="1"} 2\n'

# (bad line, column, words in the message, does prometheus_client reject the page too?)
MALFORMED = [
    ('bad{gpu="0} 1', 9, "not terminated", True),
    ('bad{gpu="0\\t"} 1', 11, "invalid escape sequence '\\\\t'", False),
    ('bad{gpu="0"}', 13, "missing value", True),
    ("bad", 4, "missing value", True),
    ('bad{gpu="0"} one', 14, "invalid value 'one'", True),
    ('bad{gpu="0"} 1_000', 14, "invalid value '1_000'", True),
    ("bad 1e400", 5, "invalid value '1e400'", False),
    ("bad 0x1p3", 5, "invalid value '0x1p3'", True),
    ('bad{gpu="0"} 1 2 3', 18, "unexpected text after the timestamp", False),
    ('bad{gpu="0"} 1 1.5', 16, "invalid timestamp '1.5'", False),
    ("bad 1 9223372036854775808", 7, "invalid timestamp", False),
    ('bad{gpu="0",gpu="1"} 1', 13, "duplicate label name 'gpu'", True),
    ("1bad 1", 1, "invalid metric name", True),
    ("bad.metric 1", 4, "invalid character '.' in metric name", True),
    ('bad{gpu.id="0"} 1', 8, "expected '=' after label name 'gpu'", True),
    ('bad{1gpu="0"} 1', 5, "invalid label name", True),
    ('bad{__gpu="0"} 1', 5, "reserved", True),
    ("bad{gpu=0} 1", 9, "must be in double quotes", True),
    ('bad{gpu="0" uuid="x"} 1', 13, "expected ',' or '}'", False),
    ('bad{gpu="0",,uuid="x"} 1', 13, "empty label", True),
    ('bad{gpu="0"', 12, "label block is not closed", True),
    ('{__name__="bad"} 1', 1, "missing metric name", False),
    ("# TYPE bad", 11, "TYPE line without a type", True),
    ("# TYPE bad gauge summary", 12, "unknown metric type", True),
    ("# TYPE 1bad gauge", 8, "invalid metric name '1bad'", True),
    ("# HELP bad-name help", 8, "invalid metric name", True),
]


@pytest.mark.parametrize(("bad", "column", "words", "oracle_rejects"), MALFORMED)
def test_malformed_line_is_reported_and_the_rest_kept(
    bad: str, column: int, words: str, oracle_rejects: bool
) -> None:
    page_text = GOOD + bad + "\n" + AFTER
    parser = ExpositionParser()
    for _ in range(3):  # then the good lines come from the cache, then the steady state
        page = parser.parse(page_text, source="http://gpu01:9400/metrics")
        assert page.rejected_lines == 1
        [error] = page.errors
        assert isinstance(error, ExpositionError)
        assert isinstance(error, SourceError)
        assert (error.source, error.line, error.column) == ("http://gpu01:9400/metrics", 4, column)
        assert words in error.message
        assert error.describe().startswith(f"http://gpu01:9400/metrics:4:{column}: ")
        kept = [(series.name, value) for series, value, _ in page.samples()]
        assert kept == [("good", 1.0), ("after", 2.0)]
    if oracle_rejects:
        with pytest.raises(ValueError):  # noqa: PT011 - prometheus_client raises a bare ValueError
            list(text_string_to_metric_families(page_text))
    assert_same_samples(_samples(ExpositionParser(), page_text), oracle_samples(GOOD + AFTER))


def test_a_known_series_with_a_bad_value_is_still_rejected() -> None:
    parser = ExpositionParser()
    parser.parse('m{gpu="0"} 1\n', source="t")
    page = parser.parse('m{gpu="0"} 1x\nm{gpu="0"} 1\t\n', source="t")
    assert [error.line for error in page.errors] == [1]
    assert page.errors[0].column == 12
    assert page.values == [1.0]


def test_second_type_line_is_reported_and_metadata_replayed() -> None:
    text = "# TYPE a gauge\n# TYPE a counter\na 1\n# TYPE b gauge extra\nb 2\n"
    parser = ExpositionParser()
    for _ in range(3):
        page = parser.parse(text, source="t")
        assert page.types == {"a": "gauge"}
        assert [(error.line, error.field) for error in page.errors] == [(2, "a"), (4, "b")]
        assert page.values == [1.0, 2.0]
    changed = text.replace("# TYPE b gauge extra", "# TYPE b counter")
    page = parser.parse(changed, source="t")
    assert page.types == {"a": "gauge", "b": "counter"}
    assert [error.line for error in page.errors] == [2]


def test_errors_are_capped_but_counted() -> None:
    page = ExpositionParser(max_errors=5).parse("<html>\n" * 50 + "ok 1\n", source="t")
    assert page.rejected_lines == 50
    assert len(page.errors) == 5
    assert page.values == [1.0]


def test_series_table_is_compacted_under_churn() -> None:
    parser = ExpositionParser(compact_above=100)
    for job in range(40):
        text = "".join(f'm{{gpu="{gpu}",hpc_job="{job}"}} {gpu}\n' for gpu in range(8))
        page = parser.parse(text, source="t")
        assert [(series.label("hpc_job"), value) for series, value, _ in page.samples()] == [
            (str(job), float(gpu)) for gpu in range(8)
        ]
        assert len(parser.series) <= 108
    assert parser.generation > 0


def test_values_prometheus_rejects_are_rejected_for_known_series_too() -> None:
    parser = ExpositionParser()
    parser.parse("m 1\nn 2\no 3\n", source="t")
    page = parser.parse("m -nan\nn 1e400\no +Infinity\n", source="t")
    assert [(error.line, error.column) for error in page.errors] == [(1, 3), (2, 3)]
    assert page.values == [math.inf]


def test_a_large_target_is_not_reexamined_on_every_scrape() -> None:
    parser = ExpositionParser(compact_above=50)
    text = "".join(f'm{{gpu="{gpu}"}} 1\n' for gpu in range(120))
    for _ in range(3):
        page = parser.parse(text, source="t")
        assert len(page) == 120 and page.new_series in (0, 120)
    assert parser.generation == 0  # every series is live: nothing to drop
    assert parser._compact_at == 240


def test_steady_state_still_reads_changed_comments_and_values() -> None:
    parser = ExpositionParser()
    for value in range(3):
        page = parser.parse(f"# TYPE a gauge\n# HELP a one\na {value}\n", source="t")
        assert (page.types, page.values) == ({"a": "gauge"}, [float(value)])
    page = parser.parse("# TYPE a counter\n# HELP a two\na 7\n", source="t")  # same heads
    assert (page.types, page.helps, page.values) == ({"a": "counter"}, {"a": "two"}, [7.0])
    page = parser.parse("# TYPE a counter\n# HELP a two\na x7\n", source="t")
    assert page.values == [] and [error.column for error in page.errors] == [3]
