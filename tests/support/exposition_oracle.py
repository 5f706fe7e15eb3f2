"""prometheus_client's parser as the oracle for ours, and Hypothesis strategies for pages.

``prometheus_client.parser.text_string_to_metric_families`` groups samples into families and,
for a counter family whose name lacks ``_total``, renames its samples ``<name>_total``: the
comparison here undoes only that, and compares values as float64 (the format's type; the
oracle returns Python ints for integer tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, dict[str, str], float, float | None]


@dataclass(frozen=True)
class OracleSample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None
    in_counter_family: bool


def oracle_samples(text: str) -> list[OracleSample]:
    """Every sample prometheus_client reads from ``text``, in page order (raises if it does)."""
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            timestamp = None if sample.timestamp is None else float(sample.timestamp)
            samples.append(
                OracleSample(
                    sample.name,
                    dict(sample.labels),
                    float(sample.value),
                    timestamp,
                    family.type == "counter",
                )
            )
    return samples


def oracle_helps(text: str) -> dict[str, str]:
    """Help text per family name as prometheus_client reads it (families with a HELP line)."""
    return {
        family.name: family.documentation
        for family in text_string_to_metric_families(text)
        if family.documentation
    }


def same_value(left: float, right: float) -> bool:
    """Equal as float64, NaN equal to NaN."""
    if math.isnan(left) or math.isnan(right):
        return math.isnan(left) and math.isnan(right)
    return left == right


def assert_same_samples(ours: list[Sample], theirs: list[OracleSample]) -> None:
    """Our samples equal the oracle's, one for one, in order."""
    assert len(ours) == len(theirs), (len(ours), len(theirs), ours, theirs)
    for index, ((name, labels, value, timestamp), oracle) in enumerate(
        zip(ours, theirs, strict=True)
    ):
        expected_names = {oracle.name}
        if oracle.in_counter_family and oracle.name.endswith("_total"):
            expected_names.add(oracle.name[: -len("_total")])
        assert name in expected_names, (index, name, oracle)
        assert labels == oracle.labels, (index, labels, oracle)
        assert same_value(value, oracle.value), (index, value, oracle)
        assert timestamp == oracle.timestamp, (index, timestamp, oracle)


# -- Hypothesis: pages that both parsers must read the same way ------------------------------

_BLANKS = st.sampled_from([" ", "\t", "  ", " \t "])
_OPTIONAL_BLANKS = st.sampled_from(["", "", "", " ", "\t", "  "])

metric_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,14}", fullmatch=True).filter(
    lambda name: name != "_total"  # prometheus_client cannot name the counter family ""
)
label_names = st.from_regex(
    r"[a-zA-Z][a-zA-Z0-9_]{0,8}|_[a-zA-Z0-9][a-zA-Z0-9_]{0,6}", fullmatch=True
)
label_values = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12
)
# Help text: anything printable, inner blanks included (both parsers strip the line's ends).
help_texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
    max_size=20,
)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@st.composite
def value_tokens(draw: st.DrawFn) -> str:
    """A value as some exporter would print it: Go %f, %d, repr, exponent, special values."""
    kind = draw(st.sampled_from(["f", "d", "repr", "e", "g", "special", "signed"]))
    if kind == "special":
        return draw(st.sampled_from(["NaN", "+Inf", "-Inf", "Inf", "nan", "inf", "-inf"]))
    if kind == "d":
        return str(draw(st.integers(min_value=-(2**70), max_value=2**70)))
    number = draw(st.floats(allow_nan=False, allow_infinity=False))
    if kind == "f":
        return f"{number:f}"
    if kind == "e":
        return f"{number:e}"
    if kind == "g":
        return f"{number:g}"
    if kind == "signed":
        return f"+{abs(number)!r}"
    return repr(number)


@st.composite
def timestamp_tokens(draw: st.DrawFn) -> str:
    stamp = draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
    if stamp >= 0 and draw(st.booleans()):
        return f"+{stamp}"
    return str(stamp)


@st.composite
def sample_lines(draw: st.DrawFn, name: str) -> str:
    """One valid sample line of metric ``name`` with varied but legal blanks."""
    labels = draw(st.dictionaries(label_names, label_values, max_size=4))
    line = draw(_OPTIONAL_BLANKS) + name
    if bool(labels) or draw(st.booleans()):
        pairs = [
            f"{draw(_OPTIONAL_BLANKS)}{label}{draw(_OPTIONAL_BLANKS)}={draw(_OPTIONAL_BLANKS)}"
            f'"{escape_label_value(value)}"{draw(_OPTIONAL_BLANKS)}'
            for label, value in labels.items()
        ]
        trailing = "," if bool(pairs) and draw(st.booleans()) else ""
        line += draw(_OPTIONAL_BLANKS) + "{" + ",".join(pairs) + trailing + "}"
        line += draw(_OPTIONAL_BLANKS)
    else:
        line += draw(_BLANKS)
    line += draw(value_tokens())
    if draw(st.booleans()):
        line += draw(_BLANKS) + draw(timestamp_tokens())
    return line + draw(_OPTIONAL_BLANKS)


_SUFFIXES = {
    "histogram": ["_bucket", "_sum", "_count"],
    "summary": ["", "_sum", "_count"],
}


@st.composite
def families(draw: st.DrawFn, name: str) -> list[str]:
    """HELP/TYPE (each optional) and the samples of one family."""
    lines = []
    metric_type = draw(
        st.sampled_from([None, "counter", "gauge", "untyped", "histogram", "summary"])
    )
    if draw(st.booleans()):
        help_text = draw(help_texts).strip()
        lines.append(f"# HELP {name} {escape_help(help_text)}".rstrip())
    if metric_type is not None:
        lines.append(f"# TYPE {name} {metric_type}")
    suffixes = _SUFFIXES.get(metric_type or "", [""])
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        lines.append(draw(sample_lines(name + draw(st.sampled_from(suffixes)))))
    return lines


@st.composite
def pages(draw: st.DrawFn) -> str:
    """A valid page: families with unique names, comments and blank lines between, LF or CRLF."""
    names = draw(st.lists(metric_names, min_size=1, max_size=5, unique=True))
    lines: list[str] = []
    for name in names:
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", "# a comment", "#", "#x y z", "\t"])))
        lines.extend(draw(families(name)))
    newline = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    ending = newline if draw(st.booleans()) else ""
    return newline.join(lines) + ending
