"""Per-rank summaries merged centrally give exactly the analysis of the raw traces.

The property draws captures from the real traces (the param 8-rank DLRM set and HTA's 2-rank
set): a subset of ranks, each rank's clock moved and stretched (``t -> offset + scale * t``, so
ranks run at different speeds and another rank may become the straggler), hosts kept or
dropped (same clock or not). ``merge(summaries)`` must print the same JSON bytes as
``analyse(traces)``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from pathlib import Path

import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hpcscope.analysis.traces.rank_summary import (
    SUMMARY_SCHEMA,
    decode_summary,
    encode_summary,
    summarize,
    to_timeline,
)
from hpcscope.analysis.traces.rank_timeline import RankTimeline, rank_timeline
from hpcscope.cli.main import app
from hpcscope.ingest.traces.kineto import read_kineto
from hpcscope.model.errors import SourceError
from hpcscope.model.trace_events import RankTrace
from hpcscope.service.traces.comm_report import bundled_table
from hpcscope.service.traces.inputs import find_traces
from hpcscope.service.traces.pipeline import analyze_timelines, to_json
from hpcscope.service.traces.summaries import merge_summaries, summarize_traces
from tests.support.paths import FIXTURES

TRACES = FIXTURES / "traces"
SETS = {
    "param": TRACES / "param_dlrm_8rank" / "dlrm_kineto.tar.gz",
    "hta": TRACES / "hta_trace_filter_2rank",
}
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


@functools.cache
def _traces(name: str) -> tuple[RankTrace, ...]:
    out = []
    for item in find_traces([SETS[name]]):
        if item.data is not None:
            out.append(
                read_kineto(
                    item.member or item.path, source=item.name, stream=io.BytesIO(item.data)
                )
            )
        else:
            out.append(read_kineto(item.path, source=item.name))
    return tuple(sorted(out, key=lambda t: t.rank))


def _moved(trace: RankTrace, offset_us: float, scale: float, keep_host: bool) -> RankTrace:
    ev = trace.events
    events = dataclasses.replace(ev, ts_us=offset_us + scale * ev.ts_us, dur_us=scale * ev.dur_us)
    metadata = dict(trace.metadata)
    if not keep_host:
        metadata.pop("host_name", None)
    return dataclasses.replace(trace, events=events, metadata=metadata)


def _document(timelines: list[RankTimeline]) -> bytes:
    return orjson.dumps(to_json(analyze_timelines(timelines)), option=_JSON)


captures = st.sampled_from(sorted(SETS)).flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.lists(
            st.tuples(
                st.floats(-1e7, 1e7, allow_nan=False),
                st.floats(0.5, 2.0, allow_nan=False),
            ),
            min_size=len(_traces(name)),
            max_size=len(_traces(name)),
        ),
        st.sets(st.integers(0, len(_traces(name)) - 1), min_size=2),
        st.booleans(),
    )
)


@settings(max_examples=25, deadline=None)
@given(captures)
def test_merging_summaries_gives_the_analysis_of_the_traces(
    capture: tuple[str, list[tuple[float, float]], set[int], bool],
) -> None:
    name, clocks, chosen, keep_host = capture
    traces = [
        _moved(trace, *clocks[i], keep_host) for i, trace in enumerate(_traces(name)) if i in chosen
    ]
    timelines = [rank_timeline(t, bundled_table()) for t in traces]
    merged = [
        to_timeline(decode_summary(encode_summary(summarize(tl)), source=f"rank {tl.rank}"))
        for tl in timelines
    ]
    assert _document(merged) == _document(timelines)


def test_summarize_then_merge_prints_what_analyze_prints(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "summaries"
    written = runner.invoke(
        app, ["traces", "summarize", str(SETS["param"]), "--out", str(out), "--json"]
    )
    assert written.exit_code == 0, written.output
    files = orjson.loads(written.stdout)["summaries"]
    assert [Path(f).name for f in files] == [f"rank-{r:05d}-steps-10-10.hpcsum" for r in range(8)]
    json_bytes = sum(t.bytes_read for t in _traces("param"))
    assert sum(Path(f).stat().st_size for f in files) < json_bytes / 20  # small to ship
    merged = runner.invoke(app, ["traces", "merge", str(out), "--json"])
    analysed = runner.invoke(app, ["traces", "analyze", str(SETS["param"]), "--json"])
    assert merged.exit_code == analysed.exit_code == 0
    assert merged.stdout == analysed.stdout


def test_a_summary_of_another_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    (path,) = summarize_traces(
        [TRACES / "hta_trace_filter_2rank" / "sampled_rank-0.json.gz"], tmp_path
    )
    summary = decode_summary(path.read_bytes(), source=str(path))
    path.write_bytes(
        encode_summary(msgspec.structs.replace(summary, schema="hpcscope.traces.rank-summary/0"))
    )
    with pytest.raises(SourceError, match=r"schema 'hpcscope.traces.rank-summary/0' is not") as err:
        merge_summaries([tmp_path])
    assert err.value.source == str(path)
    assert SUMMARY_SCHEMA.endswith("/1")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not msgpack at all", "not an hpcscope trace summary"),
        (msgspec.msgpack.encode({"schema": SUMMARY_SCHEMA, "rank": "x"}), "invalid trace summary"),
    ],
)
def test_a_broken_summary_is_an_error_naming_the_file(
    tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "rank-00000-steps-1-1.hpcsum"
    path.write_bytes(data)
    with pytest.raises(SourceError, match=message) as err:
        merge_summaries([path])
    assert err.value.source == str(path)


def test_arrays_of_the_wrong_length_are_named(tmp_path: Path) -> None:
    tl = rank_timeline(_traces("hta")[0])
    summary = msgspec.structs.replace(
        summarize(tl), step_end_us=np.zeros(len(tl.steps) + 1).tobytes()
    )
    with pytest.raises(SourceError, match="step_end_us"):
        to_timeline(summary, source="x.hpcsum")


def test_two_summaries_of_one_rank_are_refused(tmp_path: Path) -> None:
    one = TRACES / "hta_trace_filter_2rank" / "sampled_rank-0.json.gz"
    summarize_traces([one], tmp_path / "a")
    summarize_traces([one], tmp_path / "b")
    with pytest.raises(SourceError, match="two summaries for rank 0"):
        merge_summaries([tmp_path])
