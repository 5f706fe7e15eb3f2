"""A real node_exporter (Debian 1.5.0) over real /sys/class/infiniband trees: names understood,
octets x4 not applied twice, narrow counters' saturation, counter resets, stored rows."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import polars as pl
import pyarrow as pa
import pytest

from hpcscope.analysis.infiniband import counter_resets, port_rates
from hpcscope.ingest.exporters.infiniband import (
    COUNTER_WIDTH_BITS,
    InfinibandConversion,
    infiniband_rows,
)
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.ingest.exposition.scrape import Target
from hpcscope.model.schemas import IB_PORT_SCHEMA
from hpcscope.service.collect.clock import SystemClock
from hpcscope.service.collect.collector import Collector
from hpcscope.service.sources.node import NodeScrape
from hpcscope.store import Store
from hpcscope.store.infiniband import append_ib_counters, ib_counters
from tests.support.node_exporter import extract_ttar, node_exporter
from tests.support.paths import FIXTURES

IB = FIXTURES / "infiniband"
H100 = IB / "sysfs_h100_gpud"

pytestmark = pytest.mark.e2e


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def rows_from(
    text: str, *, source: str, node: str = "n01", parser: ExpositionParser | None = None
) -> InfinibandConversion:
    page = (parser or ExpositionParser()).parse(text, source=source)
    assert page.rejected_lines == 0
    return infiniband_rows(page, ts=now(), node=node)


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_live_node_exporter_matches_its_own_e2e_fixture(tmp_path: Path) -> None:
    """node_exporter over its own sysfs fixture prints what its e2e test expects: the rows we
    read from the live page and from the committed e2e output are identical."""
    extract_ttar(IB / "sysfs_class_infiniband_node_exporter_fixture.ttar", tmp_path)
    with node_exporter(tmp_path / "sys") as url:
        live = rows_from(httpx2.get(url, timeout=5).text, source=url)
    oracle = rows_from((IB / "node_exporter_infiniband_e2e_output.prom").read_text(), source="e2e")
    assert live.unknown_families == oracle.unknown_families == []
    drop = ["ts"]
    assert live.table.drop(drop).to_pylist() == oracle.table.drop(drop).to_pylist()
    ports = {(r["device"], r["port"]) for r in live.table.to_pylist()}
    assert ports == {("mlx4_0", 1), ("mlx4_0", 2), ("i40iw0", 1)}
    # the 32-bit port_xmit_wait of mlx4_0 port 1 is stuck at 2**32 - 1
    assert ("mlx4_0", 1, "port_transmit_wait_total") in live.saturated


def test_h100_tree_names_units_and_saturation() -> None:
    with node_exporter(H100) as url:
        conversion = rows_from(httpx2.get(url, timeout=5).text, source=url)
    table = conversion.table
    assert table.schema == IB_PORT_SCHEMA
    rows = {r["device"]: r for r in table.to_pylist()}
    assert sorted(rows) == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
        "mlx5_bond_0",
    ]  # fmt: skip
    words = int((H100 / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").read_text())
    assert rows["mlx5_0"]["port_data_transmitted_bytes_total"] == words * 4  # x4 once, by n_e
    assert rows["mlx5_0"]["state_id"] == 4 and rows["mlx5_0"]["physical_state_id"] == 5
    assert rows["mlx5_0"]["rate_bytes_per_second"] == 400e9 / 8  # 4X NDR
    assert rows["mlx5_bond_0"]["rate_bytes_per_second"] == 200e9 / 8
    assert rows["mlx5_0"]["hca_type"] == "MT4129"
    assert ("mlx5_1", 1, "link_downed_total") in conversion.saturated  # 8-bit counter at 255
    assert rows["mlx5_0"]["legacy_data_received_bytes_total"] is None  # 64-bit counters here


def test_counter_reset_between_scrapes_is_detected(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(H100, sysfs)
    counters = sysfs / "class/infiniband/mlx5_0/ports/1/counters"
    parser = ExpositionParser()
    reads = []
    with node_exporter(sysfs) as url:
        reads.append(rows_from(httpx2.get(url, timeout=5).text, source=url, parser=parser))
        words = int((counters / "port_xmit_data").read_text())
        (counters / "port_xmit_data").write_text(str(words + 250_000_000))  # 1 GB more
        reads.append(rows_from(httpx2.get(url, timeout=5).text, source=url, parser=parser))
        (counters / "port_xmit_data").write_text("1000")  # perfquery -R: back to (almost) 0
        reads.append(rows_from(httpx2.get(url, timeout=5).text, source=url, parser=parser))
    frame = pl.concat([_frame(r.table) for r in reads])
    frame = frame.with_columns(  # fixed, well-separated times: the rates are exact
        pl.Series("ts", [datetime(2026, 1, 1, 0, 0, 10 * (i // 9)) for i in range(frame.height)])
    )
    resets = counter_resets(frame)
    assert resets.select("device", "counter", "before", "after").to_dicts() == [
        {
            "device": "mlx5_0",
            "counter": "port_data_transmitted_bytes_total",
            "before": (words + 250_000_000) * 4.0,
            "after": 4000.0,
        }
    ]
    rates = port_rates(frame, widths_bits=COUNTER_WIDTH_BITS).filter(pl.col("device") == "mlx5_0")
    assert rates["port_data_transmitted_bytes_per_second"].to_list() == [1e8, 400.0]
    assert rates["reset_counters"].to_list() == [[], ["port_data_transmitted_bytes_total"]]
    saturated = port_rates(frame, widths_bits=COUNTER_WIDTH_BITS).filter(
        pl.col("device") == "mlx5_1"
    )
    assert saturated["link_downed_per_second"].to_list() == [None, None]  # unknown, not 0


def test_rows_are_stored_and_read_back(tmp_path: Path) -> None:
    conversion = rows_from(
        (IB / "node_exporter_infiniband_e2e_output.prom").read_text(), source="e"
    )
    with Store(tmp_path / "s.duckdb") as store:
        assert append_ib_counters(store, conversion.table).result() == 3
        back = ib_counters(store, node="n01")
    assert back.schema.names == IB_PORT_SCHEMA.names
    assert back.num_rows == 3


def test_unknown_infiniband_families_are_reported_not_fatal() -> None:
    text = (IB / "node_exporter_infiniband_e2e_output.prom").read_text() + (
        "# TYPE node_infiniband_quantum_flux_total counter\n"
        'node_infiniband_quantum_flux_total{device="mlx4_0",port="1"} 7\n'
        'node_infiniband_port_data_received_bytes_total{device="mlx4_0",port="x"} 1\n'
        "node_cpu_seconds_total 5\n"
    )
    conversion = rows_from(text, source="page")
    assert conversion.unknown_families == ["node_infiniband_quantum_flux_total"]
    assert [w.field for w in conversion.warnings] == [
        "node_infiniband_port_data_received_bytes_total"
    ]
    assert conversion.table.num_rows == 3


def _node_collector(store: Store, targets: list[Target]) -> Collector:
    """A collector of one node-exporter source scraping ``targets``."""
    source = NodeScrape(
        store,
        targets_path=None,
        static_targets=tuple(targets),
        interval_seconds=15.0,
        timeout_seconds=5.0,
        clock=SystemClock(),
    )
    return Collector(store, [source])


def test_infiniband_collector_scrapes_node_exporter_into_the_store(tmp_path: Path) -> None:
    import asyncio

    with node_exporter(H100) as url, Store(tmp_path / "s.duckdb") as store:
        targets = [
            Target(url, "node", {"node": "gpu-n01"}),
            Target("http://127.0.0.1:1/metrics", "node", {"node": "gpu-n02"}),
        ]
        collector = _node_collector(store, targets)

        async def two_cycles() -> list[list[str]]:
            try:
                return [(await collector.collect_once()).errors for _ in range(2)]
            finally:
                await collector.aclose()

        first, _ = asyncio.run(two_cycles())
        store.flush()
        assert [e.split(":")[0:3] for e in first] == [["http", "//127.0.0.1", "1/metrics"]]
        stored = ib_counters(store, node="gpu-n01")  # one dead target costs its own rows
        assert ib_counters(store, node="gpu-n02").num_rows == 0
    assert stored.num_rows == 2 * 9


def test_a_rounds_port_rows_of_all_nodes_are_one_store_write(tmp_path: Path) -> None:
    import asyncio

    nodes = ["gpu-n01", "gpu-n02", "gpu-n03"]
    with node_exporter(H100) as url, Store(tmp_path / "s.duckdb") as store:
        targets = [Target(url, "node", {"node": node}) for node in nodes]
        collector = _node_collector(store, targets)
        store.flush()
        before = store.writes_committed

        async def one_cycle() -> list[str]:
            try:
                return (await collector.collect_once()).errors
            finally:
                await collector.aclose()

        assert asyncio.run(one_cycle()) == []
        store.flush()
        writes = store.writes_committed - before
        stored = {node: ib_counters(store, node=node).num_rows for node in nodes}
    assert stored == dict.fromkeys(nodes, 9)
    # the port rows of the three nodes, the three scrapes rows, the flush's own mark (one
    # write per node before: 5)
    assert writes == 3
