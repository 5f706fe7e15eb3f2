"""A node-exporter-compatible ``/metrics`` page with its InfiniBand collector, for a twin node.

node_exporter's ``infiniband`` collector (1.5, Debian 12's) reads ``/sys/class/infiniband`` and
prints, per HCA ``device`` and ``port``: ``node_infiniband_info``, the port state and rate, and
the port counters — data in bytes (sysfs counts 4-octet words; node_exporter multiplies by 4),
packets, errors, discards, link events. Values are formatted as client_golang does (Go's
shortest ``%g``: ``1.8527668e+07``). The twin's counters integrate a traffic model: each HCA sits
beside one GPU (rail-optimised fabric) and carries that GPU's share of Lustre traffic (LNet
over InfiniBand) and, for jobs that span nodes, its rail's share of the inter-node AllReduce.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from hpcscope.model.topology import Hca

#: Mean InfiniBand packet size of bulk RDMA at the NDR MTU (4096 bytes of payload).
BULK_PACKET_BYTES = 4096.0
#: Subnet management and keep-alive traffic of an otherwise idle port.
BACKGROUND_BYTES_PER_SECOND = 2.0e5


def go_float(value: float) -> str:
    """Format like Go's ``strconv.FormatFloat(v, 'g', -1, 64)``, as Prometheus' client does."""
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(str(d) for d in digits)
    sci = len(text) + exponent - 1
    prefix = "-" if sign else ""
    if sci < -4 or sci >= 6:  # Go: shortest 'g' switches to %e at exponent 6
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'+' if sci >= 0 else '-'}{abs(sci):02d}"
    if exponent >= 0:
        return prefix + text + "0" * exponent
    point = len(text) + exponent
    if point <= 0:
        return prefix + "0." + "0" * (-point) + text
    return prefix + text[:point] + "." + text[point:]


@dataclass
class PortCounters:
    """The counters of one HCA port (bytes already x4, as node_exporter prints them)."""

    received_bytes: float = 0.0
    transmitted_bytes: float = 0.0
    received_packets: float = 0.0
    transmitted_packets: float = 0.0
    multicast_received: float = 0.0
    multicast_transmitted: float = 0.0
    transmit_wait: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PortTraffic:
    """What crosses one port now, in bytes per second each way."""

    receive_bytes_per_second: float
    transmit_bytes_per_second: float


_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "node_infiniband_link_downed_total",
        "counter",
        "Number of times the link failed to recover from an error state and went down",
    ),
    (
        "node_infiniband_link_error_recovery_total",
        "counter",
        "Number of times the link successfully recovered from an error state",
    ),
    (
        "node_infiniband_multicast_packets_received_total",
        "counter",
        "Number of multicast packets received (including errors)",
    ),
    (
        "node_infiniband_multicast_packets_transmitted_total",
        "counter",
        "Number of multicast packets transmitted (including errors)",
    ),
    (
        "node_infiniband_physical_state_id",
        "gauge",
        "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, "
        "4: shift, 5: link up, 6: link error recover, 7: phytest)",
    ),
    (
        "node_infiniband_port_constraint_errors_received_total",
        "counter",
        "Number of packets received on the switch physical port that are discarded",
    ),
    (
        "node_infiniband_port_constraint_errors_transmitted_total",
        "counter",
        "Number of packets not transmitted from the switch physical port",
    ),
    (
        "node_infiniband_port_data_received_bytes_total",
        "counter",
        "Number of data octets received on all links",
    ),
    (
        "node_infiniband_port_data_transmitted_bytes_total",
        "counter",
        "Number of data octets transmitted on all links",
    ),
    (
        "node_infiniband_port_discards_received_total",
        "counter",
        "Number of inbound packets discarded by the port because the port is down or congested",
    ),
    (
        "node_infiniband_port_discards_transmitted_total",
        "counter",
        "Number of outbound packets discarded by the port because the port is down or congested",
    ),
    (
        "node_infiniband_port_errors_received_total",
        "counter",
        "Number of packets containing an error that were received on this port",
    ),
    (
        "node_infiniband_port_packets_received_total",
        "counter",
        "Number of packets received on all VLs by this port (including errors)",
    ),
    (
        "node_infiniband_port_packets_transmitted_total",
        "counter",
        "Number of packets transmitted on all VLs from this port (including errors)",
    ),
    (
        "node_infiniband_port_transmit_wait_total",
        "counter",
        "Number of ticks during which the port had data to transmit but no data was sent during "
        "the entire tick",
    ),
    ("node_infiniband_rate_bytes_per_second", "gauge", "Maximum signal transfer rate"),
    (
        "node_infiniband_state_id",
        "gauge",
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, "
        "5: act defer)",
    ),
    (
        "node_infiniband_unicast_packets_received_total",
        "counter",
        "Number of unicast packets received (including errors)",
    ),
    (
        "node_infiniband_unicast_packets_transmitted_total",
        "counter",
        "Number of unicast packets transmitted (including errors)",
    ),
)


def _values(hca: Hca, counters: PortCounters) -> dict[str, float]:
    unicast_rx = counters.received_packets - counters.multicast_received
    unicast_tx = counters.transmitted_packets - counters.multicast_transmitted
    values = {
        "node_infiniband_link_downed_total": 0.0,
        "node_infiniband_link_error_recovery_total": 0.0,
        "node_infiniband_multicast_packets_received_total": counters.multicast_received,
        "node_infiniband_multicast_packets_transmitted_total": counters.multicast_transmitted,
        "node_infiniband_physical_state_id": 5.0,
        "node_infiniband_port_constraint_errors_received_total": 0.0,
        "node_infiniband_port_constraint_errors_transmitted_total": 0.0,
        "node_infiniband_port_data_received_bytes_total": counters.received_bytes,
        "node_infiniband_port_data_transmitted_bytes_total": counters.transmitted_bytes,
        "node_infiniband_port_discards_received_total": 0.0,
        "node_infiniband_port_discards_transmitted_total": 0.0,
        "node_infiniband_port_errors_received_total": 0.0,
        "node_infiniband_port_packets_received_total": counters.received_packets,
        "node_infiniband_port_packets_transmitted_total": counters.transmitted_packets,
        "node_infiniband_port_transmit_wait_total": counters.transmit_wait,
        "node_infiniband_rate_bytes_per_second": hca.rate_bits_per_second / 8,
        "node_infiniband_state_id": 4.0,
        "node_infiniband_unicast_packets_received_total": unicast_rx,
        "node_infiniband_unicast_packets_transmitted_total": unicast_tx,
    }
    values.update(counters.extra)
    return values


def render_infiniband_page(
    hcas: Sequence[Hca], counters: Sequence[PortCounters], *, firmware_version: str = "28.39.1002"
) -> str:
    """node_exporter's infiniband collector output for the given ports (families sorted)."""
    lines = [
        "# HELP node_infiniband_info Non-numeric data from /sys/class/infiniband/<device>, "
        "value is always 1.",
        "# TYPE node_infiniband_info gauge",
    ]
    for hca in sorted(hcas, key=lambda h: h.device):
        board = f"MT_{hca.hca_type.removeprefix('MT')}110032"
        lines.append(
            f'node_infiniband_info{{board_id="{board}",device="{hca.device}",'
            f'firmware_version="{firmware_version}",hca_type="{hca.hca_type}"}} 1'
        )
    rows = sorted(zip(hcas, counters, strict=True), key=lambda pair: pair[0].device)
    per_port = [(hca, _values(hca, port)) for hca, port in rows]
    for name, kind, help_text in _FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for hca, values in per_port:
            lines.append(
                f'{name}{{device="{hca.device}",port="{hca.port}"}} {go_float(values[name])}'
            )
    return "\n".join(lines) + "\n"


TrafficSource = Callable[[Hca], PortTraffic]


class InfinibandEndpoint:
    """The live counters behind one node's node_exporter page, advanced at each scrape."""

    def __init__(
        self,
        hcas: Sequence[Hca],
        *,
        traffic: TrafficSource,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
    ) -> None:
        self.hcas = tuple(hcas)
        self._traffic = traffic
        self._clock = clock
        self._last = clock()
        self._rng = np.random.default_rng(seed)
        # a port that has been up for a while: counters do not start at zero
        self._counters = [
            PortCounters(
                received_bytes=float(self._rng.integers(1, 9)) * 1e12,
                transmitted_bytes=float(self._rng.integers(1, 9)) * 1e12,
            )
            for _ in self.hcas
        ]
        for port in self._counters:
            port.received_packets = port.received_bytes / BULK_PACKET_BYTES
            port.transmitted_packets = port.transmitted_bytes / BULK_PACKET_BYTES
        self._lock = threading.Lock()

    def add_errors(self, port_index: int, family: str, count: float) -> None:
        """``count`` more of an error counter (``node_infiniband_...``) on one port: what a
        P_Key probe (constraint errors) or an rkey guess (remote access errors) leaves."""
        with self._lock:
            extra = self._counters[port_index].extra
            extra[family] = extra.get(family, 0.0) + count

    def collect(self) -> str:
        # The traffic source takes the twin's lock, whose holder (an incident) may be adding
        # errors here: read it before taking this lock, never under it (lock order).
        traffics = [self._traffic(hca) for hca in self.hcas]
        with self._lock:
            now = self._clock()
            dt = max(0.0, now - self._last)
            self._last = now
            for port, traffic in zip(self._counters, traffics, strict=True):
                jitter = 1.0 + float(self._rng.normal(0.0, 0.02))
                rx = (traffic.receive_bytes_per_second + BACKGROUND_BYTES_PER_SECOND) * jitter
                tx = (traffic.transmit_bytes_per_second + BACKGROUND_BYTES_PER_SECOND) * jitter
                port.received_bytes += rx * dt
                port.transmitted_bytes += tx * dt
                port.received_packets += rx * dt / BULK_PACKET_BYTES
                port.transmitted_packets += tx * dt / BULK_PACKET_BYTES
                port.multicast_received += 2 * dt
                port.multicast_transmitted += 1 * dt
                # congestion grows with load: a few ticks per GB at this fabric's utilisation
                port.transmit_wait += tx * dt / 1e9 * 3
            return render_infiniband_page(self.hcas, self._counters)
