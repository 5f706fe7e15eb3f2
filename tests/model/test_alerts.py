"""The alert model: severities, vectors, the deduplication key, the JSON view."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.alerts import (
    VECTOR_WEIGHTS,
    Alert,
    AlertState,
    Evidence,
    Severity,
    Vector,
    dedup_key,
)

T = datetime(2026, 1, 1, 12, 0, 0)


def test_severity_parses_names_and_numbers_and_orders() -> None:
    assert Severity.parse("high") is Severity.HIGH
    assert Severity.parse(4) is Severity.CRITICAL
    assert Severity.LOW < Severity.MEDIUM < Severity.HIGH < Severity.CRITICAL
    with pytest.raises(ValueError, match="unknown severity 'HUGE'"):
        Severity.parse("HUGE")


def test_every_vector_has_a_weight() -> None:
    assert [int(v) for v in Vector] == [0, 1, 2, 3, 4, 5, 6]  # 0: SLO burn rates
    assert set(VECTOR_WEIGHTS) == set(Vector)


@given(
    st.text(min_size=1, max_size=8),
    st.text(max_size=8),
    st.text(max_size=8),
    st.one_of(st.none(), st.integers(0, 7)),
    st.text(max_size=8),
)
def test_dedup_key_separates_fields(
    rule: str, job: str, node: str, gpu: int | None, sub: str
) -> None:
    key = dedup_key(rule, job_id=job, node=node, gpu=gpu, subject=sub)
    assert key == dedup_key(rule, job_id=job, node=node, gpu=gpu, subject=sub)
    # moving text from one field to the next must not give the same alert
    assert key != dedup_key(rule, job_id=job + "x", node=node, gpu=gpu, subject=sub)
    assert key != dedup_key(rule, job_id=job, node=node, gpu=gpu, subject=sub + "x")


def test_alert_json_view_names_attribution_and_evidence() -> None:
    alert = Alert(
        "GI-1", Vector.GRADIENT_INJECTION, Severity.HIGH, "outlier", T, T, count=3,
        node="n1", job_id="42", user="bob", account="nlp", gpu=3, subject="rank 3", step=17,
        evidence=(Evidence("step 17: norm z 50", "/spool/42/rank-3.jsonl", "line 18"),),
    )  # fmt: skip
    data = alert.to_dict()
    assert data["key"] == alert.key
    assert (data["job_id"], data["node"], data["gpu"], data["subject"], data["step"]) == (
        "42", "n1", 3, "rank 3", 17,
    )  # fmt: skip
    assert data["severity"] == "HIGH" and data["vector"] == 4
    assert data["state"] == AlertState.OPEN.value
    assert data["evidence"] == [
        {"summary": "step 17: norm z 50", "source": "/spool/42/rank-3.jsonl",
         "position": "line 18", "link": None}
    ]  # fmt: skip
    assert alert.priority == pytest.approx(3 * VECTOR_WEIGHTS[Vector.GRADIENT_INJECTION])


def test_vector_ids_are_the_catalogs() -> None:
    from hpcscope.model.alerts import VECTOR_NAMES
    from hpcscope.model.catalog import default_catalog

    catalog = {v.number: v.id for v in default_catalog().threat_vectors}
    assert {int(v): i for v, i in VECTOR_NAMES.items()} == catalog
