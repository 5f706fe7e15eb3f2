"""Every key of the ``nccl analyze`` JSON report is documented in docs/nccl.md."""

from __future__ import annotations

from typing import Any

from hpcscope.service.nccl.pipeline import SCHEMA, analyze
from tests.ingest.nccl.nccl_fixtures import NCCL
from tests.support.paths import REPO_ROOT


def _keys(value: Any, found: set[str], *, free_form: bool = False) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if not free_form:
                found.add(str(key))
            # maps whose keys are data (record kinds, settings, phases, states, vias)
            data_keyed = key in {
                "records",
                "settings",
                "parts_seconds",
                "states",
                "by_transport",
                "by_via",
            }
            _keys(child, found, free_form=data_keyed)
    elif isinstance(value, list):
        for child in value:
            _keys(child, found)


def test_every_report_key_is_documented() -> None:
    doc = (REPO_ROOT / "docs" / "nccl.md").read_text()
    report = analyze([NCCL])
    keys: set[str] = set()
    _keys(report, keys)
    missing = sorted(k for k in keys if f"`{k}`" not in doc and f"`{k}[]`" not in doc)
    assert missing == []
    assert f"`{SCHEMA}`" in doc


def test_every_finding_code_and_verdict_is_documented() -> None:
    doc = (REPO_ROOT / "docs" / "nccl.md").read_text()
    report = analyze([NCCL])
    for finding in report["findings"]:
        assert f"`{finding['code']}`" in doc
    from hpcscope.analysis.hangs.findings import _WATCHDOG_TEXT
    from hpcscope.analysis.hangs.types import Verdict

    for verdict in Verdict:
        assert f"`{verdict.value}`" in doc
    for _, code, _, _ in _WATCHDOG_TEXT.values():
        assert f"`{code}`" in doc
