"""The kernel class matcher, the per-rank class reduction and the per-class figures, on
small event tables whose answer is known (hypothesis draws the intervals)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.comm_phases import class_phases
from hpcscope.analysis.traces.comm_timeline import comm_timeline, gpu_step_windows
from hpcscope.analysis.traces.kernel_classes import ClassRule, ClassTable, report_class
from hpcscope.model.trace_events import EventKind, EventTable

TABLE = ClassTable(
    (
        ClassRule("^gloo:all_to_all", "cpu", "all_to_all", "ep"),
        ClassRule("^gloo:all_reduce", "cpu", "all_reduce", "dp"),
        ClassRule("^c10d::_?reduce_scatter", "cpu", "reduce_scatter", "dp", role="launch"),
        ClassRule("^nccl:all_to_all", "cpu", "all_to_all", "ep", role="launch"),
        ClassRule("^ncclDevKernel_SendRecv", "gpu", "send_recv", "pp"),
        ClassRule("^aten::", "cpu", "compute", "none"),
        ClassRule("gemm", "gpu", "compute", "none"),
        ClassRule("dpsk::ep::", "gpu", "all_to_all", "ep"),
    )
)


def _table(rows: list[tuple[EventKind, str, int, float, float, int]]) -> EventTable:
    names = sorted({r[1] for r in rows})
    return EventTable(
        kind=np.array([r[0] for r in rows], dtype=np.int8),
        name=np.array([names.index(r[1]) for r in rows], dtype=np.int32),
        thread=np.array([r[2] for r in rows], dtype=np.int64),
        ts_us=np.array([r[3] for r in rows], dtype=np.float64),
        dur_us=np.array([r[4] for r in rows], dtype=np.float64),
        correlation=np.array([r[5] for r in rows], dtype=np.int64),
        group=np.full(len(rows), -1, dtype=np.int32),
        names=tuple(names),
    )


def test_first_matching_rule_wins_and_unknown_names_are_none() -> None:
    site = ClassTable((ClassRule("^gloo:all_to_all", "cpu", "all_to_all", "tp"), *TABLE.rules))
    assert site.classify("gloo:all_to_all", "cpu").klass == "tp_collective"  # type: ignore[union-attr]
    assert TABLE.classify("gloo:all_to_all", "cpu").klass == "ep_all_to_all"  # type: ignore[union-attr]
    assert TABLE.classify("gloo:all_to_all", "gpu") is None
    assert TABLE.classify("my_custom_kernel", "gpu") is None
    assert report_class("all_gather", "dp") == "dp_shard"
    assert report_class("recv", "pp") == "pp_send_recv"
    with pytest.raises(ValueError, match="unknown op"):
        ClassTable((ClassRule("x", "gpu", "teleport", "dp"),))


def test_a_transfer_takes_the_class_of_its_launch_operator() -> None:
    ev = _table(
        [
            # a SendRecv kernel launched under nccl:all_to_all is expert all-to-all ...
            (EventKind.ANNOTATION, "nccl:all_to_all", 1, 0.0, 10.0, -1),
            (EventKind.RUNTIME, "cudaLaunchKernel", 1, 2.0, 1.0, 7),
            (EventKind.KERNEL, "ncclDevKernel_SendRecv", 9, 20.0, 30.0, 7),
            # ... one launched on its own is pipeline send/recv; an unknown kernel is listed
            (EventKind.RUNTIME, "cudaLaunchKernel", 1, 60.0, 1.0, 8),
            (EventKind.KERNEL, "ncclDevKernel_SendRecv", 9, 70.0, 5.0, 8),
            (EventKind.KERNEL, "my_kernel", 3, 0.0, 2.0, -1),
            (EventKind.KERNEL, "sgemm_128", 3, 30.0, 10.0, -1),
        ]
    )
    comm = comm_timeline(ev, TABLE)
    assert sorted(comm.classes) == ["ep_all_to_all", "pp_send_recv"]
    assert comm.classes["ep_all_to_all"].total() == 30.0
    assert comm.classes["pp_send_recv"].total() == 5.0
    assert comm.bubble.total() == 5.0
    assert comm.unclassified == {"my_kernel": 2e-6}
    assert comm.compute.total() == 10.0


def test_a_gloo_reduce_scatter_run_as_all_reduce_is_named_by_its_launch() -> None:
    ev = _table(
        [
            (EventKind.CPU_OP, "c10d::reduce_scatter_", 1, 0.0, 1.0, -1),
            (EventKind.ANNOTATION, "gloo:all_reduce", 5, 2.0, 10.0, -1),
            (EventKind.ANNOTATION, "gloo:all_reduce", 6, 3.0, 10.0, -1),
            (EventKind.CPU_OP, "aten::mm", 1, 5.0, 4.0, -1),
            (EventKind.CPU_OP, "Weird op", 1, 20.0, 1.0, -1),
            (EventKind.ANNOTATION, "## my range ##", 1, 0.0, 30.0, -1),
        ]
    )
    comm = comm_timeline(ev, TABLE)
    assert list(comm.classes) == ["dp_shard"]
    assert comm.classes["dp_shard"].total() == 11.0
    assert comm.unclassified == {"Weird op": 1e-6}  # the annotation is not an operator


spans = st.lists(st.tuples(st.integers(0, 900), st.integers(1, 100)), min_size=1, max_size=12)


def _covered(items: list[tuple[int, int]]) -> set[int]:
    return {t for start, length in items for t in range(start, start + length)}


@settings(max_examples=60, deadline=None)
@given(comm=spans, compute=spans, own=spans)
def test_seconds_hidden_and_exposed_match_a_microsecond_count(
    comm: list[tuple[int, int]], compute: list[tuple[int, int]], own: list[tuple[int, int]]
) -> None:
    """All-to-all on gloo's thread 5, compute on thread 1 and, nested in thread 5's own
    transfers, on thread 5 (which hides nothing of its own thread)."""
    rows = [(EventKind.ANNOTATION, "ProfilerStep#1", 1, 0.0, 1000.0, -1)]
    rows += [(EventKind.ANNOTATION, "gloo:all_to_all", 5, float(s), float(d), -1) for s, d in comm]
    rows += [(EventKind.CPU_OP, "aten::mm", 1, float(s), float(d), -1) for s, d in compute]
    rows += [(EventKind.CPU_OP, "aten::add", 5, float(s), float(d), -1) for s, d in own]
    timeline = comm_timeline(_table(rows), TABLE)
    step_seconds = np.array([[1000.0 / 1e6]])
    phases = class_phases([timeline], [0], [1], np.array([[[0.0, 1000.0]]]), step_seconds)
    c_set = {t for t in _covered(comm) if t < 1000}
    k_set = (_covered(compute) | (_covered(own) - _covered(comm))) & set(range(1000))
    assert phases.classes == ("ep_all_to_all",)
    assert phases.seconds[0, 0, 0] * 1e6 == pytest.approx(len(c_set))
    assert phases.hidden[0, 0, 0] * 1e6 == pytest.approx(len(c_set & k_set))
    assert phases.exposed[0, 0, 0] * 1e6 == pytest.approx(len(c_set - k_set))
    assert phases.what_if_gain_seconds["ep_all_to_all"] * 1e6 == pytest.approx(len(c_set - k_set))


def test_the_rank_the_others_wait_for_is_named_with_its_class() -> None:
    def rank(wait: float) -> EventTable:
        return _table([(EventKind.ANNOTATION, "gloo:all_to_all", 5, 0.0, wait, -1)])

    timelines = [comm_timeline(rank(w), TABLE) for w in (9000.0, 9500.0, 500.0, 8800.0)]
    windows = np.tile(np.array([0.0, 10000.0]), (4, 1, 1))
    phases = class_phases(timelines, [0, 1, 2, 3], [1], windows, np.full((4, 1), 0.01))
    (straggler,) = phases.stragglers
    assert straggler.message == "rank 2 slow in expert all-to-all"
    assert straggler.wait_seconds_per_step == pytest.approx(0.0085)
    balanced = [comm_timeline(rank(w), TABLE) for w in (9000.0, 9500.0, 8700.0, 8800.0)]
    assert not class_phases(balanced, [0, 1, 2, 3], [1], windows, np.full((4, 1), 0.01)).stragglers


def test_gpu_work_that_runs_past_its_cpu_step_stays_in_that_step() -> None:
    """A one-step GPU rank whose last kernels run after the CPU step ended (as on the public
    H800 MoE rank): the step on the GPU holds all of them, the hidden part counts compute on
    the other stream."""
    rows = [(EventKind.ANNOTATION, "ProfilerStep#1", 1, 0.0, 100.0, -1)]
    for corr, (name, stream, start, dur) in enumerate(
        [
            ("dpsk::ep::internode::dispatch", 27, 10.0, 60.0),
            ("sgemm_128", 7, 20.0, 40.0),
            ("dpsk::ep::internode::combine", 27, 90.0, 50.0),  # runs to 140 > 100
            ("sgemm_128", 7, 95.0, 35.0),
        ]
    ):
        rows.append((EventKind.RUNTIME, "cudaLaunchKernel", 1, 1.0 + corr, 1.0, corr))
        rows.append((EventKind.KERNEL, name, stream, start, dur, corr))
    step_start, step_end = np.array([0.0]), np.array([100.0])
    timeline = comm_timeline(_table(rows), TABLE, step_start, step_end)
    assert timeline.step_windows_us is not None
    assert timeline.step_windows_us.tolist() == [[10.0, 140.0]]
    phases = class_phases(
        [timeline], [0], [1], timeline.step_windows_us[None, :, :], np.array([[1e-4]])
    )
    assert phases.seconds[0, 0, 0] * 1e6 == pytest.approx(110.0)
    assert phases.hidden[0, 0, 0] * 1e6 == pytest.approx(40.0 + 35.0)
    # without the step's CPU windows (the old call) nothing is placed on the GPU
    assert comm_timeline(_table(rows), TABLE).step_windows_us is None


@settings(max_examples=80, deadline=None)
@given(
    steps=st.integers(1, 5),
    kernels=st.lists(
        st.tuples(st.floats(0, 499), st.floats(0, 200), st.floats(0, 300)), max_size=30
    ),
)
def test_gpu_step_windows_split_the_gpu_time_without_loss_or_overlap(
    steps: int, kernels: list[tuple[float, float, float]]
) -> None:
    """Steps of 100 µs on the CPU; kernels (launch, delay, duration), each step's kernels
    starting after the previous step's. The windows are contiguous and in order, each starts
    at or before its own first kernel, and together they hold every kernel the steps launched
    from the first one's start to the last one's end."""
    step_start = np.arange(steps, dtype=np.float64) * 100.0
    step_end: npt.NDArray[np.float64] = step_start + 100.0
    launch = np.array([k[0] for k in kernels], dtype=np.float64)
    start = np.sort(launch) + np.array([k[1] for k in kernels], dtype=np.float64)
    launch = np.sort(launch)
    start = np.maximum.accumulate(start) if len(start) else start
    end = start + np.array([k[2] for k in kernels], dtype=np.float64)
    w = gpu_step_windows(launch, start, end, step_start, step_end)
    assert w.shape == (steps, 2)
    assert (w[:, 1] >= w[:, 0]).all()
    assert (w[1:, 0] == w[:-1, 1]).all()
    step = np.floor(launch / 100.0).astype(int)
    inside = step < steps
    for k in np.flatnonzero(inside).tolist():
        s = int(step[k])
        assert w[s, 0] <= start[k]
        assert end[k] <= w[-1, 1]
