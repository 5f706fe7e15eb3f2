"""The vectorised barrier-wait grouping agrees exactly with the per-instance reference it
replaced (kept here, as it was, as the oracle), on real ranks and on random instances."""

from __future__ import annotations

import dataclasses
import functools
import io
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.phases import F64, collective_waits
from hpcscope.analysis.traces.rank_timeline import RankTimeline, rank_timeline
from hpcscope.ingest.traces.kineto import read_kineto
from hpcscope.service.traces.inputs import find_traces
from tests.support.paths import FIXTURES


def reference_waits(timelines: Sequence[RankTimeline]) -> tuple[list[F64], int, int, float | None]:
    """Barrier wait (µs) of every collective instance of every rank.

    Returns:
        Per rank an array aligned with its ``collective_*`` arrays; the number of matched
        and unmatched instances; the median end-time spread (µs) of matched instances.
    """
    groups: dict[tuple[int, str, int], list[tuple[int, int]]] = defaultdict(list)
    for r, tl in enumerate(timelines):
        for i in range(tl.collective_step.shape[0]):
            step = int(tl.collective_step[i])
            if step < 0:
                continue
            key = (
                tl.steps[step],
                tl.collective_keys[int(tl.collective_key[i])],
                int(tl.collective_ordinal[i]),
            )
            groups[key].append((r, i))
    waits = [np.zeros(tl.collective_step.shape[0]) for tl in timelines]
    hosts = {tl.host for tl in timelines}
    same_clock = len(hosts) == 1 and None not in hosts
    matched = unmatched = 0
    spreads: list[float] = []
    n = len(timelines)
    for members in groups.values():
        if len(members) < 2:
            unmatched += len(members)
            continue
        if len(members) < n:
            unmatched += len(members)
        else:
            matched += len(members)
        durs = np.array(
            [
                timelines[r].collective_end_us[i] - timelines[r].collective_start_us[i]
                for r, i in members
            ]
        )
        ends = np.array([timelines[r].collective_end_us[i] for r, i in members])
        starts = ends - durs
        if same_clock:
            last = float(starts.max())
            for (r, i), start, dur in zip(members, starts, durs, strict=True):
                waits[r][i] = min(max(0.0, last - float(start)), float(dur))
        else:
            shortest = float(durs.min())
            for (r, i), dur in zip(members, durs, strict=True):
                waits[r][i] = max(0.0, float(dur) - shortest)
        spreads.append(float(ends.max() - ends.min()))
    skew = float(np.median(spreads)) if spreads else None
    return waits, matched, unmatched, skew


@functools.cache
def _real() -> tuple[RankTimeline, ...]:
    items = find_traces([FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"])
    traces = [
        read_kineto(i.member or i.path, source=i.name, stream=io.BytesIO(i.data or b""))
        for i in items
    ]
    return tuple(sorted((rank_timeline(t) for t in traces), key=lambda t: t.rank))


def _same(timelines: Sequence[RankTimeline]) -> None:
    waits, matched, unmatched, skew = collective_waits(timelines)
    ref_waits, ref_matched, ref_unmatched, ref_skew = reference_waits(timelines)
    assert (matched, unmatched, skew) == (ref_matched, ref_unmatched, ref_skew)
    assert len(waits) == len(ref_waits)
    for mine, theirs in zip(waits, ref_waits, strict=True):
        assert mine.tobytes() == theirs.tobytes()  # the same floats, bit for bit


@settings(max_examples=40, deadline=None)
@given(
    st.sets(st.integers(0, 7), min_size=1),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=8, max_size=8),
    st.booleans(),
)
def test_real_ranks_agree_with_the_reference(
    chosen: set[int], offsets: list[float], keep_host: bool
) -> None:
    timelines = [
        dataclasses.replace(
            tl,
            collective_start_us=tl.collective_start_us + offsets[i],
            collective_end_us=tl.collective_end_us + offsets[i] * 1.5,
            host=tl.host if keep_host else None,
        )
        for i, tl in enumerate(_real())
        if i in chosen
    ]
    _same(timelines)


instances = st.lists(
    st.tuples(
        st.integers(-1, 2),  # step index (-1: outside every step)
        st.integers(0, 2),  # key
        st.integers(0, 3),  # ordinal
        st.floats(0, 1e4, allow_nan=False),  # start
        st.floats(0, 1e3, allow_nan=False),  # duration
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(instances, min_size=1, max_size=5), st.booleans())
def test_random_instances_agree_with_the_reference(
    ranks: list[list[tuple[int, int, int, float, float]]], same_host: bool
) -> None:
    base = _real()[0]
    timelines = []
    for r, rows in enumerate(ranks):
        # one instance per (step, key, ordinal) on a rank, as the reduction numbers them
        unique = {(s, k, o): (start, dur) for s, k, o, start, dur in rows}
        keys = list(unique)
        timelines.append(
            dataclasses.replace(
                base,
                rank=r,
                steps=(10, 11, 12),
                collective_step=np.array([k[0] for k in keys], dtype=np.int64),
                collective_key=np.array([k[1] for k in keys], dtype=np.int64),
                collective_ordinal=np.array([k[2] for k in keys], dtype=np.int64),
                collective_start_us=np.array([unique[k][0] for k in keys], dtype=np.float64),
                collective_end_us=np.array([sum(unique[k]) for k in keys], dtype=np.float64),
                collective_keys=("AllReduce", "SendRecv", "AllGather"),
                host="node-1" if same_host else f"node-{r}",
            )
        )
    _same(timelines)
