"""Xid counts and posture facts from real-format pages: dcgm-exporter's
``DCGM_EXP_XID_ERRORS_COUNT{xid}`` and the posture check's node_exporter textfile series."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.alerts.posture import FLAGS, postures_from_facts
from hpcscope.ingest.exporters.node_facts import (
    FactSeries,
    is_xid_count,
    posture_rows,
    xid_count_rows,
)
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.twin.dcgm import render_page
from hpcscope.twin.posture import PATCHED, NodeCheck, posture_page
from hpcscope.twin.telemetry_traces import GpuState, _counters, gpus

TS = datetime(2026, 12, 1, 12, 0, 0)


def _page(text: str, source: str = "http://gpu01:9400/metrics") -> object:
    return ExpositionParser().parse(text, source=source)


def test_xid_counts_of_a_dcgm_page_with_their_job() -> None:
    node_gpus = gpus("gpu01")
    counters = {g.index: _counters(GpuState()) for g in node_gpus}
    counters[3] = _counters(GpuState(job_id="4410002", xid_counts=((13, 6), (31, 24))))
    text = render_page(node_gpus, counters, {"3": ["4410002"]}, hostname="gpu01")
    rows = xid_count_rows(_page(text), ts=TS, node="gpu01")  # type: ignore[arg-type]
    assert rows.errors == ()
    assert rows.table.to_pylist() == [
        {"ts": TS, "node": "gpu01", "gpu": 3, "job_id": "4410002", "xid": 13, "xid_count": 6.0},
        {"ts": TS, "node": "gpu01", "gpu": 3, "job_id": "4410002", "xid": 31, "xid_count": 24.0},
    ]


def test_a_series_without_a_numeric_xid_is_an_error_naming_the_page() -> None:
    text = (
        "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-1",hostname="gpu01",xid="x"} 3\n'
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-2",hostname="gpu01",xid="43",hpc_job="0"} 2\n'
    )
    rows = xid_count_rows(_page(text), ts=TS, node="gpu01")  # type: ignore[arg-type]
    assert [(r["gpu"], r["xid"], r["job_id"]) for r in rows.table.to_pylist()] == [(1, 43, None)]
    assert len(rows.errors) == 1
    message = str(rows.errors[0])
    assert "http://gpu01:9400/metrics" in message and "xid='x'" in message


def test_a_posture_series_without_its_labels_is_an_error() -> None:
    text = 'hpcscope_posture_version_info{package="runc"} 1\nhpcscope_posture_flag 1\n'
    rows = posture_rows(_page(text, "http://gpu01:9100/metrics"), ts=TS, node="gpu01")  # type: ignore[arg-type]
    assert rows.table.num_rows == 0
    assert [e.field for e in rows.errors] == [
        "hpcscope_posture_version_info",
        "hpcscope_posture_flag",
    ]


_label_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20
)


@settings(max_examples=60, deadline=None)
@given(
    versions=st.dictionaries(st.sampled_from(["torch", "runc", "ray", "nvidia-container-toolkit"]),
                             _label_text, max_size=4),
    raised=st.frozensets(st.sampled_from(sorted(FLAGS))),
    datasets=st.dictionaries(_label_text, st.tuples(_label_text, st.booleans()), max_size=3),
    checked=st.integers(1_700_000_000, 1_900_000_000),
)  # fmt: skip
def test_posture_textfile_round_trips(
    versions: dict[str, str],
    raised: frozenset[str],
    datasets: dict[str, tuple[str, bool]],
    checked: int,
) -> None:
    check = NodeCheck(checked, versions=versions, raised=raised, datasets=datasets)
    page = _page(posture_page(check, written_at_seconds=checked), "gpu05 node_exporter")
    rows = posture_rows(page, ts=TS, node="gpu05")  # type: ignore[arg-type]
    assert rows.errors == ()
    [posture] = postures_from_facts(rows.table.to_pylist())
    assert posture.node == "gpu05"
    assert posture.checked_at == from_epoch_seconds(checked)
    assert dict(posture.versions) == versions
    assert {f for f in FLAGS if getattr(posture, f)} == raised
    assert dict(posture.datasets) == datasets


def test_a_page_without_posture_series_has_no_rows() -> None:
    check = NodeCheck(1_796_126_400, versions=dict(PATCHED))
    text = posture_page(check, written_at_seconds=1_796_126_400)
    other = "\n".join(line for line in text.splitlines() if "hpcscope_posture" not in line)
    rows = posture_rows(_page(other + "\n"), ts=TS, node="gpu01")  # type: ignore[arg-type]
    assert rows.table.num_rows == 0 and rows.errors == ()


def test_a_target_s_fact_series_follow_its_pages() -> None:
    """The remembered positions give the rows a full look gives, page after page: no Xid, an
    Xid appearing (a new series), the same page again, another GPU's, none, a new table."""
    node_gpus = gpus("gpu01")
    quiet = {g.index: _counters(GpuState()) for g in node_gpus}

    def page_with(xids: dict[int, tuple[tuple[int, int], ...]]) -> str:
        counters = dict(quiet)
        for gpu, counts in xids.items():
            counters[gpu] = _counters(GpuState(job_id="7", xid_counts=counts))
        return render_page(node_gpus, counters, {"3": ["7"]}, hostname="gpu01")

    pages = [page_with({}), page_with({3: ((13, 6),)}), page_with({3: ((13, 7),)}),
             page_with({5: ((31, 1),), 3: ((13, 7),)}), page_with({})]  # fmt: skip
    parser = ExpositionParser()
    picker = FactSeries(is_xid_count)
    counts = []
    for text in pages:
        page = parser.parse(text, source="gpu01")
        picked = xid_count_rows(page, ts=TS, node="gpu01", picker=picker).table.to_pylist()
        assert picked == xid_count_rows(page, ts=TS, node="gpu01").table.to_pylist()
        counts.append(len(picked))
    assert counts == [0, 1, 1, 2, 0]
    page = ExpositionParser().parse(pages[3], source="gpu01")  # another table, other ids
    rows = xid_count_rows(page, ts=TS, node="gpu01", picker=picker).table.to_pylist()
    assert [(r["gpu"], r["xid"], r["xid_count"]) for r in rows] == [(3, 13, 7.0), (5, 31, 1.0)]
