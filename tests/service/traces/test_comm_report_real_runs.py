"""Acceptance: communication classes on real gloo ranks under the real profiler.

Expert all-to-all (4 ranks, with and without overlap on gloo's worker thread), FSDP-like
all-gather/reduce-scatter (4 ranks) and a 2-stage pipeline (send/recv, ranks 0 and 1), one
injected slow rank in each, all in one launch of 4 ranks (starting torch is most of the time).
The truth comes from the profiler's own intervals, read here from the trace JSON with plain
Python: a class's time is the union of the scenario's ``gloo:*`` ranges inside the
``ProfilerStep#N`` windows; the compute that hides it is the union, thread by thread, of the
``aten::*`` operators minus that thread's own ``gloo:*`` ranges.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hpcscope.service.traces.pipeline import analyze, to_json
from tests.support.comm_ranks import CommScenario, generate
from tests.support.plain_intervals import Interval, length, union

# serial: it measures real ranks sharing the 2 cores; `make test` runs it alone after the
# parallel part (a second worker beside it skewed the timings: seen in a full run)
pytestmark = [pytest.mark.torch, pytest.mark.serial]


#: the slow rank's delay: 40 ms per step in each scenario, large against the contention of
#: four ranks on a shared two-core machine (at 20 ms a loaded machine hid it in one run of 3)
SCENARIOS = [
    CommScenario("a2a-sync", "a2a", slow_rank=2, delay_seconds=0.04),
    CommScenario("a2a-overlap", "a2a", slow_rank=1, delay_seconds=0.04, overlap=True),
    CommScenario("fsdp", "fsdp", slow_rank=3, delay_seconds=0.04),
    # ranks 0 and 1 only (2 and 3 idle meanwhile); the delay is per micro-batch (4 per step)
    CommScenario("pipeline", "pipeline", slow_rank=0, delay_seconds=0.01, ranks=2),
]
CLASS = {"a2a": "ep_all_to_all", "fsdp": "dp_shard", "pipeline": "pp_send_recv"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = generate(SCENARIOS, tmp_path_factory.mktemp("comm"), world_size=4)
    return {s.name: out / s.name for s in SCENARIOS}


def _analysis(path: Path, scenario: CommScenario) -> Mapping[str, Any]:
    result = to_json(analyze([path], world_size=scenario.ranks))["comm_classes"]
    assert isinstance(result, dict)
    return result


def _cut(a: list[Interval], b: list[Interval], keep_inside: bool) -> list[Interval]:
    """``a ∩ b`` (keep_inside) or ``a \\ b``, both unions."""
    points = sorted({p for s in a + b for p in s})
    pieces = []
    for lo, hi in itertools.pairwise(points):
        mid = (lo + hi) / 2
        in_a = any(x <= mid < y for x, y in a)
        in_b = any(x <= mid < y for x, y in b)
        if in_a and in_b == keep_inside:
            pieces.append((lo, hi))
    return union(pieces)


def _truth(trace: Path, recv_only: bool = False) -> dict[str, float]:
    """Seconds over the profiled steps: comm (union of gloo ranges), hidden, and (pipeline)
    the exposed receives."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")]
    comm: list[Interval] = []
    recv: list[Interval] = []
    by_thread: dict[Any, tuple[list[Interval], list[Interval]]] = {}
    for e in events:
        span = (float(e["ts"]), float(e["ts"] + e["dur"]))
        own = by_thread.setdefault(e["tid"], ([], []))
        if e["name"].startswith("gloo:"):
            comm.append(span)
            own[1].append(span)
            if e["name"] == "gloo:recv":
                recv.append(span)
        elif e.get("cat") == "cpu_op" and e["name"].startswith("aten::"):
            own[0].append(span)
    compute = union(
        [s for ops, mine in by_thread.values() for s in _cut(union(ops), union(mine), False)]
    )
    window = union(steps)
    comm_in = _cut(union(comm), window, True)
    recv_in = _cut(union(recv), window, True)
    return {
        "seconds": length(comm_in) / 1e6,
        "hidden": length(_cut(comm_in, compute, True)) / 1e6,
        "bubble": length(_cut(recv_in, compute, False)) / 1e6,
    }


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_class_matches_the_profiler_intervals(
    runs: dict[str, Path], scenario: CommScenario
) -> None:
    doc = _analysis(runs[scenario.name], scenario)
    assert doc["unclassified"] == []
    klass = CLASS[scenario.kind]
    (entry,) = [c for c in doc["classes"] if c["class"] == klass]
    assert [c["class"] for c in doc["classes"]] == [klass]  # nothing else found
    steps = len(doc["per_step"])
    for rank, path in enumerate(sorted(runs[scenario.name].glob("rank-*.json"))):
        truth = _truth(path)
        seconds = entry["seconds_per_step"][str(rank)] * steps
        hidden = entry["hidden_seconds_per_step"][str(rank)] * steps
        assert seconds == pytest.approx(truth["seconds"], rel=0.05), (rank, truth)
        assert abs(hidden / seconds - truth["hidden"] / truth["seconds"]) <= 0.05, (rank, truth)
        if scenario.kind == "pipeline":
            bubble = doc["bubble_seconds_per_step"][str(rank)] * steps
            assert bubble == pytest.approx(truth["bubble"], rel=0.05, abs=1e-4), (rank, truth)
    messages = [s["message"] for s in doc["stragglers"]]
    assert f"rank {scenario.slow_rank} slow in {entry['label']}" in messages, doc["stragglers"]


def test_overlap_hides_the_all_to_all_and_the_pipeline_has_a_bubble(
    runs: dict[str, Path],
) -> None:
    sync, overlap = (_analysis(runs[s.name], s)["classes"][0] for s in SCENARIOS[:2])
    assert sync["hidden_ratio"] == 0.0  # the main thread waits: nothing runs meanwhile
    # with the all-to-all on gloo's worker thread, the compute issued after it runs meanwhile.
    # Which rank's share is largest depends on how the 4 ranks share the 2 cores: the slow
    # rank's transfer alone (3-6 ms) was 98 % hidden in three runs, 8.5 % (of 1.1 ms) in one
    # full `make test`; the class as a whole was 21-25 % hidden in all four, so the class is
    # asserted here (each rank's figure is checked against the trace's own intervals above)
    assert overlap["hidden_ratio"] > 0.1, overlap
    doc = _analysis(runs["pipeline"], SCENARIOS[3])
    # stage 1 waits for stage 0's first forward and for its slow forwards: a bubble every step
    assert doc["bubble_seconds_per_step"]["1"] > 0.01, doc["bubble_seconds_per_step"]
    (entry,) = doc["classes"]
    assert entry["what_if_gain_seconds"] > 0
