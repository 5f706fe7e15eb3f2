"""Network evidence from InfiniBand port counters: the straggler's node against its peers'."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.fabric_evidence import bracket, fabric_evidence, node_fabric
from hpcscope.model.schemas import IB_PORT_SCHEMA

T0 = datetime(2026, 11, 29, 12, 0, 0)
WIDTHS = {"symbol_error_total": 16, "link_downed_total": 8}


def _reads(
    node: str,
    symbol_errors: list[float],
    *,
    device: str = "mlx5_0",
    state: list[int] | None = None,
    link_downed: list[float] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for i, value in enumerate(symbol_errors):
        row: dict[str, Any] = dict.fromkeys(IB_PORT_SCHEMA.names)
        row.update(
            ts=T0 + timedelta(seconds=10 * i),
            node=node,
            device=device,
            port=1,
            state_id=(state or [4] * len(symbol_errors))[i],
            physical_state_id=5,
            symbol_error_total=value,
            link_downed_total=(link_downed or [0.0] * len(symbol_errors))[i],
            port_transmit_wait_total=1000.0 * i,
        )
        rows.append(row)
    return rows


def _frame(*parts: list[dict[str, Any]]) -> pl.DataFrame:
    rows = [row for part in parts for row in part]
    frame = pl.from_arrow(pa.Table.from_pylist(rows, schema=IB_PORT_SCHEMA))
    assert isinstance(frame, pl.DataFrame)
    return frame


RANKS = {0: "gpu01", 1: "gpu01", 2: "gpu02", 3: "gpu02"}


def test_errors_on_the_stragglers_node_support_a_network_cause() -> None:
    # gpu02's counter is reset in the middle (100 -> 3): the increase restarts from 0
    fabric = node_fabric(
        _frame(_reads("gpu01", [5, 5, 5, 5]), _reads("gpu02", [90, 100, 3, 40])),
        widths_bits=WIDTHS,
    )
    assert fabric["gpu02"].errors["symbol_error_total"] == 10 + 3 + 37
    assert fabric["gpu02"].transmit_wait == 3000.0
    [item] = fabric_evidence([3], RANKS, fabric)[3]
    assert item.kind == "network" and item.supports
    assert "50 symbol errors" in item.summary and "gpu02" in item.summary
    assert item.figures["errors"] == 50 and item.figures["peers_max_errors"] == 0


def test_a_clean_fabric_rules_the_network_out() -> None:
    fabric = node_fabric(_frame(_reads("gpu01", [5, 5, 6]), _reads("gpu02", [7, 7, 7])))
    [item] = fabric_evidence([3], RANKS, fabric)[3]
    assert not item.supports
    assert "not it" in item.summary and "no error" in item.summary


def test_fewer_errors_than_a_peer_node_is_not_evidence() -> None:
    fabric = node_fabric(_frame(_reads("gpu01", [0, 40]), _reads("gpu02", [0, 2])))
    [item] = fabric_evidence([3], RANKS, fabric)[3]
    assert not item.supports and item.figures["peers_max_errors"] == 40


def test_a_port_down_in_the_window_supports_a_network_cause() -> None:
    fabric = node_fabric(
        _frame(
            _reads("gpu01", [0, 0, 0]),
            _reads("gpu02", [0, 0, 0], state=[4, 1, 4], link_downed=[0, 1, 1]),
        )
    )
    [item] = fabric_evidence([2], RANKS, fabric)[2]
    assert item.supports and "mlx5_0/1" in item.summary
    assert item.figures["link_downed_total"] == 1


def test_a_saturated_counter_is_a_caveat_not_a_count() -> None:
    stuck = float(2**16 - 1)
    fabric = node_fabric(
        _frame(_reads("gpu01", [0, 0]), _reads("gpu02", [stuck, stuck])), widths_bits=WIDTHS
    )
    assert fabric["gpu02"].saturated == ("symbol_error_total",)
    [item] = fabric_evidence([3], RANKS, fabric)[3]
    assert not item.supports and "perfquery -x -R" in item.summary


def test_one_node_means_nvlink_only() -> None:
    [item] = fabric_evidence([1], {0: "gpu01", 1: "gpu01"}, {})[1]
    assert not item.supports and "NVLink" in item.summary


def test_nothing_is_said_without_counters_for_the_stragglers_node() -> None:
    fabric = node_fabric(_frame(_reads("gpu01", [0, 0])))
    assert fabric_evidence([3], RANKS, fabric) == {}
    assert fabric_evidence([9], RANKS, fabric) == {}  # a rank that could not be placed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.booleans()), min_size=2, max_size=12))
def test_the_increase_is_every_step_up_with_resets_restarting_from_zero(
    steps: list[tuple[int, bool]],
) -> None:
    """A read sequence built from increments, some reads after a reset (the counter restarted
    from 0 and then counted ``step``, seen as a value below the previous one): the node's
    increase is the sum of what was counted."""
    values: list[float] = [0.0]
    expected = 0
    for step, reset in steps:
        if reset and step < values[-1]:
            values.append(float(step))
        else:
            values.append(values[-1] + step)
        expected += step
    fabric = node_fabric(_frame(_reads("gpu02", values)))
    assert fabric["gpu02"].errors["symbol_error_total"] == expected


def test_only_the_reads_that_bracket_the_window_count() -> None:
    # reads every 10 s; the window is 15-25 s: the reads at 10 and 30 s bracket it, so the
    # errors counted before 10 s and after 30 s are not the window's
    reads = _frame(_reads("gpu02", [0, 500, 510, 520, 9000]))
    window = (T0 + timedelta(seconds=15), T0 + timedelta(seconds=25))
    kept = bracket(reads, *window)
    assert kept["symbol_error_total"].to_list() == [500, 510, 520]
    fabric = node_fabric(reads, window=window)
    assert fabric["gpu02"].errors["symbol_error_total"] == 20
    # a window inside one scrape interval keeps the two reads around it
    inside = (T0 + timedelta(seconds=21), T0 + timedelta(seconds=22))
    assert bracket(reads, *inside)["symbol_error_total"].to_list() == [510, 520]
