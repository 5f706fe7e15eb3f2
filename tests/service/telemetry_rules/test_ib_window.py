"""The InfiniBand window kept run to run by the engine gives, at every run, the view and the
alerts a whole read of the store gives: over the twin's IB scenarios on a real DuckDB store,
with rows stored late (within the re-read margin) and rows stored far behind the cut (a
backfill: the window is read again)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from hpcscope.analysis.telemetry_rules.ib_view import IbView
from hpcscope.analysis.telemetry_rules.rules import evaluate
from hpcscope.model.alerts import RuleSpec
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.telemetry_rules.engine import TelemetryRules
from hpcscope.service.telemetry_rules.ib_window import IbWindow
from hpcscope.store import Store
from hpcscope.twin import attacks_telemetry, benign_telemetry
from hpcscope.twin.attacks import Scenario
from hpcscope.twin.telemetry_traces import SECOND_NS
from tests.support.telemetry_replay import load_scenario, port_gpus

T0 = 1_796_126_400 * SECOND_NS
START = from_epoch_seconds(T0 / SECOND_NS)


@pytest.fixture(scope="module")
def rules() -> dict[str, RuleSpec]:
    return load_site_rules(None)


def _rows(frame: pl.DataFrame) -> list[dict[str, object]]:
    if frame.height == 0:
        return []
    return sorted(frame.to_dicts(), key=lambda r: (r["node"], r["device"], r["port"], r["ts"],
                                                   str(r.get("counter"))))  # fmt: skip


def _same(a: IbView | None, b: IbView | None) -> None:
    assert a is not None and b is not None
    assert {n: list(p) for n, p in a.series.items()} == {n: list(p) for n, p in b.series.items()}
    assert _rows(a.rises) == _rows(b.rises)
    assert _rows(a.resets) == _rows(b.resets)


def _with_pages(s: Scenario, keep: object) -> Scenario:
    part = copy.copy(s)
    part.pages = [p for p in s.pages if keep(p)]  # type: ignore[operator]
    return part


def _rebuilt(window: IbWindow) -> bool:
    """Whether the window's last run read all of it again (a call: mypy keeps no narrowing)."""
    return window.rebuilt


def _end(s: Scenario) -> datetime:
    assert s.evaluate_at_ns is not None
    return from_epoch_seconds(s.evaluate_at_ns / SECOND_NS)


@pytest.mark.parametrize(
    "make",
    [
        attacks_telemetry.low_and_slow,  # an hour: the calibration minutes before the window
        attacks_telemetry.dp_node_over_median,
        attacks_telemetry.counter_reset,
        attacks_telemetry.pkey_probing,
        attacks_telemetry.correlated_pair,
        benign_telemetry.benign_maintenance_reset,
    ],
)
def test_each_run_equals_a_whole_read(
    make: object, rules: dict[str, RuleSpec], tmp_path: Path
) -> None:
    s: Scenario = make(T0)  # type: ignore[operator]
    with Store(tmp_path / "s.duckdb") as store:
        load_scenario(store, s, tmp_path / "spool")
        engine = TelemetryRules(store, rules, port_gpus=port_gpus(s))
        window = engine.ib_window()
        at, runs, found = START + timedelta(seconds=40), 0, set()
        while at <= _end(s) + timedelta(seconds=45):
            kept, whole = engine.read(at, window=window), engine.read(at)
            _same(kept.ib, whole.ib)
            alerts = evaluate(kept, rules)
            assert alerts == evaluate(whole, rules)
            found |= {a.rule_id for a in alerts}
            assert window.rebuilt is (runs == 0)
            runs, at = runs + 1, at + timedelta(seconds=47)  # cuts fall anywhere in a slot
        assert set(s.expected) <= found  # the scenario's alerts were raised along the way


def test_rows_stored_late_and_far_behind(rules: dict[str, RuleSpec], tmp_path: Path) -> None:
    s = attacks_telemetry.dp_node_over_median(T0)
    first = START + timedelta(minutes=8)
    held = [p for p in s.pages if p[2] == "gpu02" and p[1] == "infiniband"]
    late_from = from_epoch_seconds(held[0][0] / SECOND_NS)
    with Store(tmp_path / "s.duckdb") as store:
        # by the first run: everything up to it but gpu02's last 20 s, and gpu02's minutes 2-4
        def stored_by_first(p: tuple[int, str, str, str]) -> bool:
            ts = from_epoch_seconds(p[0] / SECOND_NS)
            if p[2] != "gpu02" or p[1] != "infiniband":
                return ts <= first
            minutes = (ts - late_from).total_seconds() / 60
            return ts <= first - timedelta(seconds=20) and not 2 <= minutes < 4

        load_scenario(store, _with_pages(s, stored_by_first), tmp_path / "a")
        engine = TelemetryRules(store, rules, port_gpus=port_gpus(s))
        window = engine.ib_window()
        engine.read(first, window=window)
        assert _rebuilt(window)

        def late(p: tuple[int, str, str, str]) -> bool:  # gpu02's last 20 s, stored now
            ts = from_epoch_seconds(p[0] / SECOND_NS)
            return p in held and first - timedelta(seconds=20) < ts <= first

        load_scenario(store, _with_pages(s, late), tmp_path / "b")
        second = first + timedelta(seconds=15)
        _same(engine.read(second, window=window).ib, engine.read(second).ib)
        assert not _rebuilt(window)  # within the re-read margin: no whole read

        def behind(p: tuple[int, str, str, str]) -> bool:  # the backfill of minutes 2-4
            minutes = (from_epoch_seconds(p[0] / SECOND_NS) - late_from).total_seconds() / 60
            return p in held and 2 <= minutes < 4

        load_scenario(store, _with_pages(s, behind), tmp_path / "c")
        third = second + timedelta(seconds=15)
        _same(engine.read(third, window=window).ib, engine.read(third).ib)
        assert _rebuilt(window)
        fourth = third + timedelta(seconds=15)
        _same(engine.read(fourth, window=window).ib, engine.read(fourth).ib)
        assert not _rebuilt(window)


def test_evaluate_once_reads_only_the_new_rows(rules: dict[str, RuleSpec], tmp_path: Path) -> None:
    s = attacks_telemetry.low_and_slow(T0)
    with Store(tmp_path / "s.duckdb") as store:
        load_scenario(store, s, tmp_path / "spool")
        engine = TelemetryRules(store, rules, port_gpus=port_gpus(s))
        whole = engine.evaluate_once(now=_end(s)).ib_rows
        again = engine.evaluate_once(now=_end(s) + timedelta(seconds=15)).ib_rows
        assert whole > 20 * again > 0
        back = engine.evaluate_once(now=_end(s) - timedelta(minutes=5))  # a clock that went back
        assert back.ib_rows > 10 * again
