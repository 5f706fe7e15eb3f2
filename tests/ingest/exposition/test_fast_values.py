"""``fast_values`` reads value tokens exactly as ``float`` does, or declines the page."""

from __future__ import annotations

import math
import re
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.exposition._syntax import fast_values


def _bits(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


def _float_or_none(tokens: list[str]) -> list[float] | None:
    try:
        values = [float(t) for t in tokens]
    except ValueError:
        return None
    return values


#: Decimal tokens as exporters write them, and near misses (signs, dots, exponents anywhere).
_DIGITS = st.text(alphabet="0123456789", min_size=0, max_size=40)
_DECIMAL = st.builds(
    lambda sign, whole, dot, frac, exp: sign + whole + dot + frac + exp,
    st.sampled_from(["", "-", "+"]),
    _DIGITS,
    st.sampled_from(["", "."]),
    _DIGITS,
    st.one_of(
        st.just(""),
        st.builds(
            lambda e, s, d: e + s + d,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 400).map(str),
        ),
    ),
)
#: The format's plain decimals (no NaN, Inf, underscore or space).
_PLAIN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NOISE = st.text(alphabet="0123456789.eE+-,#", min_size=0, max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_DECIMAL, st.floats().map(repr), _NOISE), min_size=1, max_size=30))
def test_the_same_floats_to_the_bit_or_the_exact_path(tokens: list[str]) -> None:
    expected = _float_or_none(tokens)
    got = fast_values(tokens)
    plain = all(_PLAIN.fullmatch(t) for t in tokens)
    if plain and expected is not None and math.isfinite(sum(expected)):
        # what exporters write is read here, not left to the slower exact path
        assert got is not None, tokens
    if got is None:
        return  # declined: the parser's exact path reads the page (tested with the parser)
    assert expected is not None, f"accepted tokens float() rejects: {tokens!r}"
    assert _bits(got) == _bits(expected)


def test_every_plain_token_of_an_exporter_page_is_read_on_the_fast_path() -> None:
    tokens = ["0", "1", "-1", "1.5", "1e+06", "3.14159e-05", "1.7976931348623157e308", "-0"]
    got = fast_values(tokens)
    assert got is not None
    assert _bits(got) == _bits([float(t) for t in tokens])


def test_what_float_accepts_and_the_format_does_not_is_declined() -> None:
    # tokens are what follows a line's last space, so they never hold a space themselves
    for odd in ["1_0", "nan", "Inf", "\t1", "1\x0b", "1e400", "", "1,5", "--1", "1e", "١"]:
        assert fast_values(["1", odd]) is None, odd
