"""HCA cards show port figures from node_exporter's InfiniBand counters, under the G5 rule."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from hpcscope.model.schemas import IB_PORT_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.diagram.cards import PortCardLive, element_card
from hpcscope.service.diagram.live import Viewer
from hpcscope.store.infiniband import append_ib_counters
from tests.support.data import populate


def _ports(service: Service, *, node: str, rx_per_second: float) -> None:
    now = utcnow()
    rows = []
    for i, age in enumerate((30, 15, 0)):
        for device in (f"mlx5_{d}" for d in range(8)):
            rows.append(
                {
                    "ts": now - timedelta(seconds=age),
                    "node": node,
                    "device": device,
                    "port": 1,
                    "state_id": 4,
                    "physical_state_id": 5,
                    "rate_bytes_per_second": 5e10,
                    "port_data_received_bytes_total": 1e12 + i * 15 * rx_per_second,
                    "port_data_transmitted_bytes_total": 1e12 + i * 15 * rx_per_second / 50,
                    "port_errors_received_total": 0.0,
                    "link_downed_total": 0.0,
                }
            )
    append_ib_counters(service.store, pa.Table.from_pylist(rows, schema=IB_PORT_SCHEMA)).result()


def _port_live(service: Service, viewer: Viewer, element_id: str) -> PortCardLive:
    """The live part of an HCA port card as ``viewer`` sees it."""
    live = element_card(service, viewer, element_id).live
    assert isinstance(live, PortCardLive)
    return live


def test_hca_card_shows_port_figures_to_those_who_may_see_the_node(service: Service) -> None:
    populate(service.store, now=utcnow())  # gpu01: alice's and bob's jobs; gpu02: dave's
    _ports(service, node="gpu01", rx_per_second=1.2e9)
    _ports(service, node="gpu02", rx_per_second=1.5e8)
    admin = _port_live(service, Viewer(service.principal("admin")), "hca-gpu01-mlx5_4")
    assert admin.port is not None
    assert admin.port.receive_bytes_per_second == 1.2e9
    assert admin.port.state == "active, link up"
    assert admin.port.errors_in_window == 0
    # gpu01 is shared by alice's and bob's jobs: alice may not see its node-level counters
    alice = _port_live(service, Viewer(service.principal("alice")), "hca-gpu01-mlx5_0")
    assert alice.port is None and "also runs jobs" in (alice.hidden or "")
    # gpu02 runs only dave's job (and idle GPUs): dave sees its ports
    dave = _port_live(service, Viewer(service.principal("dave")), "hca-gpu02-mlx5_0")
    assert dave.port is not None
    assert _port_live(service, Viewer(None), "hca-gpu02-mlx5_0").port is None
