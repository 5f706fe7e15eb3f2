"""Conformance table: what ours, prometheus_client and Prometheus' own parser accept.

Prometheus' reference parser is run for real (``promtool check metrics``, Debian's prometheus
package, which ``scripts/install-system-deps.sh`` installs). The contract: we accept a page
exactly when both prometheus_client and Prometheus accept it, except for blanks that carry no
meaning (CRLF line ends, trailing blanks), which prometheus_client accepts and we do too. A
change in either anchor's behaviour shows up here.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpcscope.ingest.exposition.parser import parse_exposition

pytestmark = pytest.mark.prometheus

# (page, ours, prometheus_client, promtool)
CASES = [
    ("a 1\n", True, True, True),
    ('a{b="c"} 1\n', True, True, True),
    ('a{b="c",} 1\n', True, True, True),
    ('a {b="c"} 1\n', True, True, True),
    ('a{ b = "c" , } 1\n', True, True, True),
    ('a{b="c"}1\n', True, True, True),
    ("a 1 -5\n", True, True, True),
    ("a 1 +5\n", True, True, True),
    ("a NaN\na +Inf\na -Inf\na Inf\na infinity\na .5\na 5.\na 1e3\n", True, True, True),
    ('a{b="\\\\"} 1\na{b="\\""} 1\na{b="\\n"} 1\na{b=""} 1\na{b="é☃"} 1\n', True, True, True),
    ("a\t1\n  a 1\n", True, True, True),
    ("# HELP a x\\\\y\\nz\n# TYPE a counter\n# comment\n\n\na 1\na 2\n", True, True, True),
    # Meaningless blanks: prometheus_client strips them, expfmt does not.
    ("a 1  \n", True, True, False),
    ("a 1\r\nb 2\r\n", True, True, False),
    # prometheus_client is laxer than Prometheus; we side with Prometheus.
    ("a 1 2 3\n", False, True, False),
    ("a 1 1.5\n", False, True, False),
    ('a{b="\\t"} 1\n', False, True, False),
    ('{__name__="a"} 1\n', False, True, False),
    ("a{,} 1\n", False, True, False),
    ("a 1e400\n", False, True, False),
    ("a -nan\n", False, True, False),
    ("# TYPE a info\na 1\n", False, True, False),
    ("# TYPE a gauge\n# TYPE a gauge\na 1\n", False, True, False),
    # Prometheus is laxer than prometheus_client here; we side with prometheus_client.
    ('a{__x="1"} 1\n', False, False, True),
    ("# TYPE a\na 1\n", False, False, True),
    # Both reject.
    ('a{b="c"\n', False, False, False),
    ("a\n", False, False, False),
    ('a{b="1",b="2"} 1\n', False, False, False),
    ("1a 1\n", False, False, False),
    ("a{b=c} 1\n", False, False, False),
    ('a{b="c" d="e"} 1\n', False, False, False),
    ("a 1_0\n", False, False, False),
    ("a 0x1p3\n", False, False, False),
    ("# TYPE a foo\na 1\n", False, False, False),
]


def _ours(text: str) -> bool:
    _, errors = parse_exposition(text)
    return not errors


def _prometheus_client(text: str) -> bool:
    try:
        list(text_string_to_metric_families(text))
    except ValueError:
        return False
    return True


def _promtool(text: str) -> bool:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: run scripts/install-system-deps.sh"
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    output = (result.stdout + result.stderr).decode()
    return "parsing error" not in output


@pytest.mark.parametrize(("text", "ours", "client", "prometheus"), CASES)
def test_conformance(text: str, ours: bool, client: bool, prometheus: bool) -> None:
    assert (_ours(text), _prometheus_client(text), _promtool(text)) == (ours, client, prometheus)
    lenient_blanks = "\r" in text or "  \n" in text
    assert ours == (client and prometheus) or (lenient_blanks and ours == client)
