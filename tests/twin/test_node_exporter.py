"""The twin's node_exporter page matches the real node_exporter's InfiniBand output."""

from __future__ import annotations

import re
import threading
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.exporters.infiniband import infiniband_rows
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.node_exporter import InfinibandEndpoint, PortTraffic, go_float

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "infiniband"
TOPOLOGY = load_topology(bundled_topology())


def _families(text: str) -> dict[str, tuple[str, str]]:
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, flags=re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))
    return {name: (helps[name], types[name]) for name in types}


def test_same_families_help_and_types_as_node_exporter_1_5() -> None:
    real = _families((REAL / "node_exporter_infiniband_e2e_output.prom").read_text())
    real = {name: value for name, value in real.items() if "_legacy_" not in name}
    hcas = TOPOLOGY.node("gpu01").hcas
    endpoint = InfinibandEndpoint(
        hcas, traffic=lambda hca: PortTraffic(1e9, 5e8), clock=iter([0.0, 10.0]).__next__
    )
    twin = _families(endpoint.collect())
    assert twin == real


@pytest.mark.parametrize(
    "text",
    [
        "1.8527668e+07",
        "61148",
        "93",
        "5e+09",
        "6.825908347e+09",
        "4.294967295e+09",
        "0",
        "6.235865e+06",
    ],
)
def test_go_float_formats_like_client_golang(text: str) -> None:
    assert go_float(float(text)) == text


@given(st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_infinity=False))
def test_go_float_round_trips(value: float) -> None:
    assert float(go_float(value)) == value


def test_counters_integrate_the_traffic_and_parse_into_port_rows() -> None:
    times = iter([0.0, 0.0, 10.0])
    hcas = TOPOLOGY.node("gpu02").hcas
    endpoint = InfinibandEndpoint(
        hcas, traffic=lambda hca: PortTraffic(1.2e9, 2.4e7), clock=times.__next__
    )
    parser = ExpositionParser()
    first = infiniband_rows(
        parser.parse(endpoint.collect(), source="twin"),
        ts=datetime(2026, 11, 29, 12, 0, 0),
        node="gpu02",
    ).table
    second = infiniband_rows(
        parser.parse(endpoint.collect(), source="twin"),
        ts=datetime(2026, 11, 29, 12, 0, 10),
        node="gpu02",
    ).table
    assert first.num_rows == second.num_rows == 8
    columns = [c for c in second.column_names if "received" in c and "bytes" in c]
    assert columns
    received = second.column(columns[0]).to_pylist()[0] - first.column(columns[0]).to_pylist()[0]
    assert received == pytest.approx(10 * 1.2e9, rel=0.1)


def test_a_scrape_while_an_incident_adds_errors_does_not_deadlock() -> None:
    """The twin's lock order: the traffic source takes the twin's lock, whose holder (the tick
    playing a P_Key probe) adds errors to this endpoint; a scrape must not hold the endpoint's
    lock while it reads the traffic (the demo's twin froze, every page with it)."""
    twin_lock = threading.Lock()
    hcas = TOPOLOGY.node("gpu02").hcas

    def traffic(hca: object) -> PortTraffic:
        with twin_lock:
            return PortTraffic(1.0e9, 1.0e7)

    endpoint = InfinibandEndpoint(hcas, traffic=traffic)
    family = "node_infiniband_port_constraint_errors_received_total"
    done = threading.Event()

    def incident() -> None:  # the tick: holds the twin's lock, then adds errors
        with twin_lock:
            scraped.start()
            pause.wait(0.5)
            endpoint.add_errors(0, family, 48.0)
        done.set()

    pause = threading.Event()
    scraped = threading.Thread(target=endpoint.collect, daemon=True)
    ticker = threading.Thread(target=incident, daemon=True)
    ticker.start()
    ticker.join(timeout=10)
    scraped.join(timeout=10)
    assert done.is_set() and not scraped.is_alive(), "the scrape and the incident deadlocked"
    page = endpoint.collect()
    assert re.search(rf"^{family}\{{[^}}]*\}} 48$", page, flags=re.MULTILINE), page
