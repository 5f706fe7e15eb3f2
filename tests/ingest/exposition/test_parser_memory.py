"""The parser's steady state keeps no second copy of its series keys."""

from __future__ import annotations

from hpcscope.ingest.exposition.parser import ExpositionParser

PAGE = "".join(
    f'# HELP m{i} x\n# TYPE m{i} gauge\nm{i}{{gpu="{g}",UUID="GPU-{g}"}} {i + g}.5\n'
    for i in range(3)
    for g in range(4)
)


def test_the_steady_heads_are_the_key_cache_strings() -> None:
    parser = ExpositionParser()
    first = parser.parse(PAGE, source="t")
    second = parser.parse(PAGE.replace(".5", ".25"), source="t")
    assert second.values == [v - 0.25 for v in first.values]
    steady = parser._steady
    assert steady is not None
    keys = {id(key) for key in parser._keys}
    samples = [head for head in steady.heads if not head.startswith("#")]
    assert len(samples) == 12 and all(id(head) in keys for head in samples)
