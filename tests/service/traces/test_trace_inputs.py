"""How ranks are parsed: in this process, with one forked helper, or in a pool; archives read
once. Every way gives the same analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcscope.model.errors import SourceError
from hpcscope.service.traces import inputs as trace_inputs
from hpcscope.service.traces import trace_files
from hpcscope.service.traces.inputs import find_traces, plan_workers
from hpcscope.service.traces.pipeline import analyze, to_json
from tests.support.paths import FIXTURES

PARAM = FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
HTA_2RANK = FIXTURES / "traces" / "hta_trace_filter_2rank"


def _doc(path: Path, **kwargs: object) -> str:
    return json.dumps(to_json(analyze([path], **kwargs)), sort_keys=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [PARAM, HTA_2RANK])
def test_every_way_of_parsing_gives_the_same_document(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_process = _doc(path, workers=1)
    pool = _doc(path, workers=2)
    monkeypatch.setattr(trace_inputs, "FORK_HELPER_JSON_BYTES", 0)
    helper = _doc(path)
    assert in_process == pool == helper


def test_a_streamed_archive_gives_the_same_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive too large to keep in memory is streamed, one pass per archive, by each way of
    parsing (in process, the forked helper's member read, extraction for a pool)."""
    reference = _doc(PARAM, workers=1)
    monkeypatch.setattr(trace_files, "_small_archive", lambda file: None)
    assert all(item.data is None for item in find_traces([PARAM]))
    in_process = _doc(PARAM, workers=1)
    pool = _doc(PARAM, workers=2)
    monkeypatch.setattr(trace_inputs, "FORK_HELPER_JSON_BYTES", 0)
    helper = _doc(PARAM)
    assert reference == in_process == pool == helper


def test_small_inputs_parse_in_process_and_sizes_are_estimated() -> None:
    items = find_traces([PARAM])
    assert len(items) == 8 and all(i.member for i in items)
    assert 800_000 < items[0].json_bytes < 1_000_000  # the member's own size
    assert plan_workers(items, None) == 1
    gz = find_traces([HTA_2RANK])
    assert gz[0].json_bytes > 1_500_000  # gzip's ISIZE trailer, not the 120 kB on disk
    assert plan_workers(items, 3) == 3


def test_a_broken_archive_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "ranks.tar.gz"
    broken.write_bytes(PARAM.read_bytes()[:1000])
    with pytest.raises(SourceError, match=r"ranks\.tar\.gz: cannot read archive"):
        analyze([broken], workers=1)


@pytest.mark.parametrize("damage", ["cut", "corrupt"])
def test_a_damaged_small_archive_is_named(tmp_path: Path, damage: str) -> None:
    """A small archive is decompressed in one go: a cut or a corrupt deflate stream is a
    named error, not a traceback."""
    data = bytearray(PARAM.read_bytes())
    if damage == "cut":
        data = data[: len(data) // 2]
    else:
        data[2000:2100] = b"\xff" * 100
    broken = tmp_path / "ranks.tar.gz"
    broken.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"ranks\.tar\.gz: cannot read archive"):
        analyze([broken], workers=1)


def test_a_servers_pool_gives_the_same_document() -> None:
    # the server parses large uploads in a pool it created once, with forkserver (it holds
    # the DuckDB file and must never fork)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        pooled = json.dumps(to_json(analyze([PARAM], executor=pool)), sort_keys=True)
    assert pooled == _doc(PARAM, workers=1)


def test_the_fork_helpers_pipe_gives_back_each_rank_and_error_exactly() -> None:
    """What the forked child sends (a summary per rank, the tuple per error) decodes to the
    same reductions: nothing falls back to parsing again in the parent."""
    from hpcscope.analysis.traces.rank_summary import encode_summary, summarize

    items = find_traces([HTA_2RANK])
    parsed = [trace_inputs.parse_one(item) for item in items]
    error = ("bad JSON", "rank9.json", 3, 14, None)
    sent = [*parsed, error]
    back = trace_inputs._decode_results(trace_inputs._encode_results(sent))
    assert back is not None and len(back) == len(sent)
    for mine, theirs in zip(parsed, back[:-1], strict=True):
        assert not isinstance(mine, tuple) and not isinstance(theirs, tuple)
        assert encode_summary(summarize(theirs)) == encode_summary(summarize(mine))
    assert back[-1] == error
    assert trace_inputs._decode_results(b"\x93not msgpack") is None
