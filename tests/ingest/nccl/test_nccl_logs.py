"""NCCL, PyTorch watchdog, nccl-tests and Megatron lines from real logs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hpcscope.ingest.nccl.logs import NcclLogParse, parse_nccl_log_bytes, read_nccl_log
from hpcscope.model.collectives import WatchdogKind
from hpcscope.model.nccl import (
    BootstrapRecord,
    ChannelCountsRecord,
    CommInitRecord,
    ConnectionRecord,
    IbAsyncRecord,
    IbCompletionRecord,
    InitTimingsRecord,
    NcclVersionRecord,
    NetRecord,
    ReturnTraceRecord,
    RingRecord,
    TopoCommRecord,
    TopoSystemRecord,
    TreeRecord,
)
from tests.ingest.nccl.nccl_fixtures import NCCL, NOT_LOGS, log_files


@pytest.fixture(scope="module")
def parsed() -> dict[str, NcclLogParse]:
    return {p.name: read_nccl_log(p) for p in log_files()}


def _all(parsed: dict[str, NcclLogParse], kind: type) -> list[object]:
    return [r for log in parsed.values() for r in log.nccl if isinstance(r, kind)]


@pytest.mark.parametrize("path", log_files(), ids=lambda p: p.name)
def test_every_sample_parses_with_no_unknown_line(path: Path) -> None:
    log = read_nccl_log(path)
    assert log.lines == log.blank_lines + log.unknown_lines + log.parsed_lines
    if path.name in NOT_LOGS:
        assert log.parsed_lines == 0
    else:
        assert log.unknown_lines == 0, log.unknown_samples
        assert log.parsed_lines > 0


def test_counts_match_the_reference_regexes(parsed: dict[str, NcclLogParse]) -> None:
    """The match counts training-steps.md §8 gives for the same samples."""
    assert len(_all(parsed, NcclVersionRecord)) == 5
    assert len(_all(parsed, BootstrapRecord)) == 9
    nets = _all(parsed, NetRecord)
    assert sum(1 for n in nets if isinstance(n, NetRecord) and n.state != "selected") == 4
    assert len(_all(parsed, CommInitRecord)) == 15
    assert len(_all(parsed, InitTimingsRecord)) == 6
    assert len(_all(parsed, TopoCommRecord)) == 5
    assert len(_all(parsed, TopoSystemRecord)) == 1
    rings = [r for r in _all(parsed, RingRecord) if isinstance(r, RingRecord)]
    assert sum(1 for r in rings if r.nchannels is not None) == 7
    assert sum(1 for r in rings if r.nchannels is None) == 8
    trees = [t for t in _all(parsed, TreeRecord) if isinstance(t, TreeRecord)]
    # 24 per-channel entries on "Trees [c] ..." lines + 3 older "Tree c : p -> r -> ..." lines
    assert len(trees) == 27
    assert len(_all(parsed, ConnectionRecord)) == 22
    assert len(_all(parsed, ChannelCountsRecord)) == 5
    assert len(_all(parsed, IbCompletionRecord)) == 6
    assert len(_all(parsed, ReturnTraceRecord)) == 17
    assert len(_all(parsed, IbAsyncRecord)) == 2
    events = [e for log in parsed.values() for e in log.watchdog]
    assert len(events) == 50
    assert sum(1 for e in events if e.pg_id is not None) == 16
    assert sum(1 for e in events if e.ran_seconds is not None) == 22
    assert len({e.source for e in events if e.ran_seconds is not None}) == 8
    kinds = Counter(e.kind for e in events)
    assert kinds[WatchdogKind.EXCEPTION] == 8
    assert kinds[WatchdogKind.TIMEOUT_AT] == 4
    assert kinds[WatchdogKind.FAILURE] == 1
    assert kinds[WatchdogKind.BLOCKING_WAIT] == 2
    assert kinds[WatchdogKind.THREAD_DIED] == 1
    tests = [t for log in parsed.values() for t in log.nccl_tests]
    assert sum(1 for t in tests if t.nthread is not None) == 4
    assert sum(len(t.devices) for t in tests) == 29
    assert sum(len(t.rows) for t in tests) == 46
    assert sum(1 for t in tests if t.avg_busbw_bytes_per_second is not None) == 1
    extremes = [s for log in parsed.values() for s in log.stragglers if hasattr(s, "metric")]
    assert len(extremes) == 28


def test_nccl_line_origin_count(parsed: dict[str, NcclLogParse]) -> None:
    """170 lines in 16 files carry NCCL's host:pid:tid [dev] prefix."""
    lines = {(r.at.source, r.at.line) for log in parsed.values() for r in log.nccl if r.origin}
    assert len(lines) == 170
    assert len({source for source, _ in lines}) == 16


def test_init_and_topology_fields() -> None:
    log = read_nccl_log(NCCL / "nccl_rings_trees_16rank_2node.log")
    topo = [r for r in log.nccl if isinstance(r, TopoCommRecord)]
    assert (topo[0].rank, topo[0].nranks, topo[0].nnodes, topo[0].local_ranks) == (6, 16, 2, 8)
    ring = next(r for r in log.nccl if isinstance(r, RingRecord))
    assert ring.channel == 0 and ring.nchannels == 8
    assert ring.order == (0, 5, 4, 7, 6, 3, 2, 1, 8, 13, 12, 15, 14, 11, 10, 9)
    trees = [r for r in log.nccl if isinstance(r, TreeRecord)]
    assert (trees[0].channel, trees[0].children, trees[0].rank, trees[0].parent) == (0, (2,), 1, 0)
    assert trees[1].children == ()


def test_legacy_rings_and_trees() -> None:
    log = read_nccl_log(NCCL / "nccl_rings_trees_h20_4rank_2node.log")
    rings = [r for r in log.nccl if isinstance(r, RingRecord)]
    assert rings[0].order == (2, 0, 1) and rings[0].nchannels is None
    root = [t for t in log.nccl if isinstance(t, TreeRecord) and t.parent == -1]
    assert {(t.channel, t.rank) for t in root} >= {(1, 1), (0, 0)}
    legacy = [t for t in log.nccl if isinstance(t, TreeRecord) and t.origin and t.rank == 3]
    assert (legacy[0].parent, legacy[0].children) == (1, (2,))


def test_connections_and_transports() -> None:
    log = read_nccl_log(NCCL / "nccl_channels_p2p_ipc_net_socket.log")
    conns = [r for r in log.nccl if isinstance(r, ConnectionRecord)]
    net = [c for c in conns if c.transport == "NET"]
    assert next((c.src_rank, c.dst_rank, c.direction, c.via) for c in net) == (
        15,
        6,
        "send",
        "NET/Socket/3",
    )
    ib = read_nccl_log(NCCL / "nccl_connect_ib_gdrdma_init_complete.log")
    vias = {c.via for c in ib.nccl if isinstance(c, ConnectionRecord)}
    assert vias == {"NET/IB/0/GDRDMA", "P2P/direct pointer"}


def test_socket_fallback_and_bootstrap_spellings() -> None:
    log = read_nccl_log(NCCL / "nccl_init_no_ib_socket_fallback.log")
    nets = [(r.net, r.state) for r in log.nccl if isinstance(r, NetRecord)]
    assert nets == [("IB", "no_device"), ("Socket", "using"), ("Socket", "selected")]
    new = read_nccl_log(NCCL / "nccl_init_newformat_2.25_b200.log")
    boot = [r for r in new.nccl if isinstance(r, BootstrapRecord)]
    assert (boot[0].interface, boot[0].address) == ("bond0", "172.19.50.38")
    roce = read_nccl_log(NCCL / "nccl_init_bootstrap_netib_roce_dgxh100.log")
    using = [r for r in roce.nccl if isinstance(r, NetRecord) and r.state == "using"]
    assert using[0].devices == ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE")


def test_ib_completion_errors_and_return_codes() -> None:
    log = read_nccl_log(NCCL / "nccl_warn_ib_completion_error_status12.log")
    errors = [r for r in log.nccl if isinstance(r, IbCompletionRecord)]
    assert [(e.status, e.vendor_err, e.direction) for e in errors] == [
        (12, 129, "Recv"),
        (5, 249, "Recv"),
    ]
    assert errors[0].peer == "172.36.143.59" and errors[0].remote_gid == "::ffff:29.87.4.221"
    traces = [r for r in log.nccl if isinstance(r, ReturnTraceRecord)]
    assert {t.code for t in traces} == {6}
    assert [t.progress_thread for t in traces[:3]] == [False, False, True]


def test_misc_oneliners_without_nccl_prefix() -> None:
    log = read_nccl_log(NCCL / "nccl_warn_misc_oneliners.log")
    events = [r for r in log.nccl if isinstance(r, IbAsyncRecord)]
    assert [(e.device, e.port, e.event, e.code) for e in events] == [
        ("mlx5_3", 1, "port error", 10),
        (None, None, "port error", None),
    ]
    assert log.launcher_ranks == {3: 1000, 4: 0}
    assert events[0].origin is not None and events[0].origin.host == "host-a"


def test_init_timings_parts() -> None:
    log = read_nccl_log(NCCL / "nccl_init_timings_2.22.log")
    first = next(r for r in log.nccl if isinstance(r, InitTimingsRecord))
    assert first.rank == 5 and first.total_seconds == pytest.approx(2.46)
    assert first.parts_seconds["bootstrap"] == pytest.approx(1.60)
    assert set(first.parts_seconds) == {
        "kernels",
        "bootstrap",
        "allgathers",
        "topo",
        "graphs",
        "connections",
        "rest",
    }


def test_topology_bandwidth_in_bytes_per_second() -> None:
    log = read_nccl_log(NCCL / "nccl_topology_system_bw_h100.log")
    system = next(r for r in log.nccl if isinstance(r, TopoSystemRecord))
    assert system.max_bw_bytes_per_second == pytest.approx(48.0e9)
    assert system.total_bw_bytes_per_second == pytest.approx(370.8e9)


def test_invalid_utf8_is_reported_with_line_and_column() -> None:
    data = b"host:1:2 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\nbad \xff byte\n"
    log = parse_nccl_log_bytes(data, source="x.log")
    assert log.unknown_lines == 1
    assert [(w.line, w.column) for w in log.warnings] == [(2, 5)]
    assert "x.log:2:5" in log.warnings[0].describe()
