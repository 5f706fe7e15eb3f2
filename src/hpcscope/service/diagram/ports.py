"""InfiniBand port figures for the diagram's HCA cards, from node_exporter's counters.

Port counters are node-level: they mix the traffic of every job on the node. A viewer sees them
when every job on the node is visible to them (an admin always; a researcher on a node that
their own jobs hold alone), never for a node shared with someone else's job (security.md G5).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.infiniband import port_rates
from hpcscope.model.topology import Hca
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import GpuState, Viewer, gpu_views
from hpcscope.store.infiniband import ib_counters


@dataclass(frozen=True, slots=True)
class PortNow:
    """An InfiniBand port over the last interval between two node_exporter reads."""

    ts: datetime
    state: str
    rate_bytes_per_second: float | None
    receive_bytes_per_second: float | None
    transmit_bytes_per_second: float | None
    errors_in_window: float
    link_downed_in_window: float
    counter_resets: tuple[str, ...]


_PORT_ERROR_RATES = (
    "port_errors_received_per_second",
    "port_discards_received_per_second",
    "port_discards_transmitted_per_second",
    "port_constraint_errors_received_per_second",
    "port_constraint_errors_transmitted_per_second",
    "symbol_error_per_second",
    "local_link_integrity_errors_per_second",
    "req_remote_access_errors_per_second",
    "resp_remote_access_errors_per_second",
)


def port_now(
    service: Service, viewer: Viewer, hca: Hca, *, now: datetime
) -> tuple[PortNow | None, str | None]:
    """The port's figures over its last interval, or None and why (hidden, or no data yet)."""
    node = service.topology.node(hca.node)
    gpus, _, _ = gpu_views(service, viewer, now=now, nodes=[node.name])
    if viewer.anonymous:
        return None, "Log in to see port figures."
    if any(g.state is GpuState.ALLOCATED or g.hidden_jobs for g in gpus.values()):
        return None, (
            "This node also runs jobs you may not see: its port figures mix their traffic "
            "with yours."
        )
    rows = ib_counters(service.store, node=node.name, since=now - timedelta(minutes=5))
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.filter((pl.col("device") == hca.device) & (pl.col("port") == hca.port))
    if frame.height < 2:
        return None, None
    rates = port_rates(frame)
    last = rates.row(-1, named=True)
    window_errors = sum(
        float((rates[c] * rates["interval_seconds"]).sum() or 0.0)
        for c in _PORT_ERROR_RATES
        if c in rates.columns
    )
    downed = (
        float((rates["link_downed_per_second"] * rates["interval_seconds"]).sum() or 0.0)
        if "link_downed_per_second" in rates.columns
        else 0.0
    )
    latest = frame.row(-1, named=True)
    state = {4: "active", 1: "down", 2: "init", 3: "armed"}.get(latest["state_id"] or 0, "unknown")
    physical = "link up" if latest["physical_state_id"] == 5 else "link not up"
    resets = tuple(sorted({c for row in rates["reset_counters"].to_list() for c in row or []}))
    return (
        PortNow(
            ts=last["ts"],
            state=f"{state}, {physical}",
            rate_bytes_per_second=latest["rate_bytes_per_second"],
            receive_bytes_per_second=last.get("port_data_received_bytes_per_second"),
            transmit_bytes_per_second=last.get("port_data_transmitted_bytes_per_second"),
            errors_in_window=window_errors,
            link_downed_in_window=downed,
            counter_resets=resets,
        ),
        None,
    )
