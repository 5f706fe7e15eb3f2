"""PyTorch ProcessGroupNCCL watchdog lines, every format generation in the samples."""

from __future__ import annotations

from collections import Counter

import pytest

from hpcscope.ingest.nccl.logs import read_nccl_log
from hpcscope.model.collectives import WatchdogEvent, WatchdogKind
from tests.ingest.nccl.nccl_fixtures import NCCL


def _events(name: str) -> list[WatchdogEvent]:
    return read_nccl_log(NCCL / name).watchdog


def test_torch_1x_legacy_format() -> None:
    events = _events("pytorch_watchdog_timeout_legacy_format.log")
    assert [e.group_rank for e in events] == [1, 3, 2, 6, 7]
    first = events[0]
    assert first.kind is WatchdogKind.TIMEOUT and first.torch_format == "1.x"
    assert (first.global_rank, first.seq, first.op, first.numel_in) == (
        None,
        469508,
        "ALLREDUCE",
        None,
    )
    assert first.timeout_seconds == pytest.approx(1800.0)
    assert first.ran_seconds == pytest.approx(1802.212)


def test_torch_25_pg_prefix_and_pid_launcher_prefix() -> None:
    events = _events("pytorch_watchdog_timeout_allreduce_torch2.5.log")
    exception = [e for e in events if e.kind is WatchdogKind.EXCEPTION]
    assert [(e.global_rank, e.pg_id, e.group_rank) for e in exception] == [(0, 1, 0), (3, 1, 3)]
    assert exception[0].torch_format == "2.5"
    assert (exception[0].seq, exception[0].last_enqueued, exception[0].last_completed) == (
        1580,
        1582,
        1579,
    )
    assert exception[0].queue_depth == 3


def test_torch_26_pg_guid_with_description() -> None:
    events = _events("pytorch_watchdog_timeout_allreduce_default_pg_torch2.6.log")
    exception = next(e for e in events if e.kind is WatchdogKind.EXCEPTION)
    assert (exception.pg_id, exception.pg_guid, exception.pg_desc) == (0, "0", "default_pg")
    assert exception.torch_format == "2.6+"
    timeout = events[0]
    assert (timeout.numel_in, timeout.numel_out) == (9801523, 9801523)


def test_global_rank_differs_from_group_rank_in_sub_groups() -> None:
    events = _events("pytorch_watchdog_timeout_alltoall_with_nccl_socket_trace.log")
    first = events[0]
    assert (first.global_rank, first.group_rank, first.op, first.seq) == (
        13,
        1,
        "ALLTOALL_BASE",
        216,
    )
    assert (first.numel_in, first.numel_out) == (1379328, 1572864)
    exception = events[1]
    assert (exception.pg_id, exception.pg_guid, exception.global_rank) == (11, "119", 13)


def test_torch_27_failure_line_and_flight_recorder_disabled() -> None:
    events = _events("pytorch_watchdog_timeout_flightrecorder_disabled_torch2.7.log")
    kinds = [e.kind for e in events]
    assert kinds.count(WatchdogKind.FLIGHT_RECORDER_DISABLED) == 2
    failure = next(e for e in events if e.kind is WatchdogKind.FAILURE)
    assert (failure.global_rank, failure.seq, failure.queue_depth) == (5, 120049, 3)
    assert failure.torch_format == "2.7+"


def test_blocking_wait() -> None:
    events = _events("pytorch_watchdog_timeout_blocking_wait.log")
    blocking = [e for e in events if e.kind is WatchdogKind.BLOCKING_WAIT]
    assert [(e.global_rank, e.seq, e.op) for e in blocking] == [
        (1, 2521, "ALLREDUCE"),
        (7, 2521, "ALLREDUCE"),
    ]
    assert blocking[0].numel_in == 160672064


def test_thread_died_keeps_its_stack() -> None:
    events = _events("pytorch_watchdog_terminated_with_exception_stack.log")
    died = next(e for e in events if e.kind is WatchdogKind.THREAD_DIED)
    assert (died.seq, died.op, died.timeout_seconds) == (1, "ALLREDUCE", 600.0)
    assert len(died.stack) == 3
    assert died.stack[0].startswith("Exception raised from checkTimeout")
    assert died.stack[2].startswith("frame #1:")


def test_mixed_optypes() -> None:
    events = _events("pytorch_watchdog_mixed_optypes_broadcast_allgather.log")
    assert [(e.global_rank, e.seq, e.op) for e in events] == [
        (2, 532339, "BROADCAST"),
        (1, 532339, "BROADCAST"),
        (0, 532341, "_ALLGATHER_BASE"),
    ]


def test_reduce_scatter_takedown() -> None:
    events = _events("pytorch_watchdog_timeout_reduce_scatter_takedown.log")
    kinds = Counter(e.kind.value for e in events)
    assert kinds == {"timeout": 3, "exception": 2, "timeout_at": 3, "takedown": 5}
    first = events[0]
    assert (first.numel_in, first.numel_out) == (544997376, 68124672)
