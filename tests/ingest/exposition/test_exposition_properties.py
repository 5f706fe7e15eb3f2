"""Property tests: our parser reads generated pages exactly as prometheus_client does."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.ingest.exposition.parser import ExpositionParser, parse_exposition
from tests.support.exposition_oracle import (
    Sample,
    assert_same_samples,
    oracle_helps,
    oracle_samples,
    pages,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _samples(parser: ExpositionParser, text: str) -> list[Sample]:
    page = parser.parse(text, source="t")
    assert page.errors == [], page.errors
    return [
        (series.name, series.labels_dict(), value, None if stamp is None else stamp / 1000)
        for series, value, stamp in page.samples()
    ]


@PROPERTY
@given(pages(), pages())
def test_same_samples_as_prometheus_client_cold_and_warm(first: str, second: str) -> None:
    parser = ExpositionParser()
    expected_first = oracle_samples(first)
    assert_same_samples(_samples(parser, first), expected_first)
    assert_same_samples(_samples(parser, first), expected_first)  # every key from the cache
    # Another page through the same parser: its cache must not leak into this one.
    assert_same_samples(_samples(parser, second), oracle_samples(second))
    assert_same_samples(_samples(parser, first), expected_first)
    assert_same_samples(_samples(parser, first), expected_first)  # the steady-state path


@PROPERTY
@given(pages())
def test_same_help_text_and_bytes_as_text(text: str) -> None:
    page = ExpositionParser().parse(text.encode(), source="t")
    theirs = oracle_helps(text)
    for family, documentation in theirs.items():
        if family in page.helps:
            assert page.helps[family] == documentation
    samples, errors = parse_exposition(text)
    assert errors == []
    assert len(samples) == len(page)


BAD_LINES = st.sampled_from(
    [
        'bad{gpu="0} 1',
        'bad{gpu="0"}',
        "bad one",
        'bad{gpu="0",gpu="1"} 1',
        "9bad 1",
        "bad{gpu=0} 1",
        'bad{gpu="0\\q"} 1',
        "bad 1 2 3",
        "bad 1 1.5",
        "# TYPE bad nonsense",
        "<html><body>502 Bad Gateway</body></html>",
        "bad{",
        "bad}",
        '{gpu="0"} 1',
        "bad 1_0",
        "bad\v1",
    ]
)


@PROPERTY
@given(pages(), st.lists(st.tuples(st.integers(min_value=0), BAD_LINES), min_size=1, max_size=4))
def test_malformed_lines_are_named_and_the_rest_matches(
    text: str, insertions: list[tuple[int, str]]
) -> None:
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    bad_line_numbers: list[int] = []
    for position, bad in insertions:
        at = position % (len(lines) + 1)
        lines.insert(at, bad)
        bad_line_numbers = [n + 1 if n >= at + 1 else n for n in bad_line_numbers]
        bad_line_numbers.append(at + 1)
    broken = newline.join(lines)
    parser = ExpositionParser()
    for _ in range(3):  # cold, key cache, steady state
        page = parser.parse(broken, source="http://gpu01:9400/metrics")
        # (lines count from 1: an error without a line cannot match one)
        assert sorted(error.line or 0 for error in page.errors) == sorted(bad_line_numbers)
        assert all(error.column is not None and error.column >= 1 for error in page.errors)
        assert all(error.source == "http://gpu01:9400/metrics" for error in page.errors)
        kept = [
            (series.name, series.labels_dict(), value, None if stamp is None else stamp / 1000)
            for series, value, stamp in page.samples()
        ]
        assert_same_samples(kept, oracle_samples(text))
