"""node_exporter's ``infiniband`` collector -> one row per port (:data:`IB_PORT_SCHEMA`).

Families (``prometheus/node_exporter collector/infiniband_linux.go``, ``telemetry.md`` §6), all
labelled ``device, port`` except ``node_infiniband_info{board_id,device,firmware_version,
hca_type}``:

* ``node_infiniband_port_data_{received,transmitted}_bytes_total``: sysfs ``port_rcv_data`` /
  ``port_xmit_data`` count 4-octet words; node_exporter already multiplies by 4 (procfs
  ``sysfs/class_infiniband.go``), so these are bytes. Do not multiply again.
* ``node_infiniband_legacy_*``: the 32-bit PortCounters (``counters_ext`` absent), which saturate
  at ``2**32 - 1``: a saturated counter says "at least", not "exactly". The error counters are
  narrower still (8 or 16 bits, 4 for two of them): :data:`COUNTER_WIDTH_BITS`.
* mlx5 ``hw_counters`` families (node_exporter >= 1.11; Debian's 1.5.0 has none).

A family of the ``node_infiniband_`` namespace that is not known here is reported in
``unknown_families`` and skipped (a newer node_exporter); other namespaces on the page (a full
node_exporter page has hundreds) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import IB_COUNTER_COLUMNS, IB_PORT_SCHEMA

PREFIX = "node_infiniband_"

_GAUGES = {"state_id", "physical_state_id", "rate_bytes_per_second"}
_KNOWN = set(IB_COUNTER_COLUMNS) | _GAUGES
_INFO = "info"

#: Width in bits of the counters that the InfiniBand PortCounters attribute keeps narrow (IBTA
#: spec, PortCounters); they stop at ``2**bits - 1`` until reset. The 64-bit extended data and
#: packet counters never saturate in practice.
COUNTER_WIDTH_BITS: dict[str, int] = {
    "symbol_error_total": 16,
    "link_error_recovery_total": 8,
    "link_downed_total": 8,
    "port_errors_received_total": 16,
    "port_receive_remote_physical_errors_total": 16,
    "port_receive_switch_relay_errors_total": 16,
    "port_discards_transmitted_total": 16,
    "port_constraint_errors_transmitted_total": 8,
    "port_constraint_errors_received_total": 8,
    "local_link_integrity_errors_total": 4,
    "excessive_buffer_overrun_errors_total": 4,
    "vl15_dropped_total": 16,
    "port_transmit_wait_total": 32,
    **{column: 32 for column in IB_COUNTER_COLUMNS if column.startswith("legacy_")},
}


class InfinibandFormatError(SourceError):
    """A node_exporter page whose InfiniBand series cannot be read."""


@dataclass(frozen=True, slots=True)
class InfinibandConversion:
    """The port rows of one page and what was left out."""

    table: pa.Table
    unknown_families: list[str] = field(default_factory=list)
    saturated: list[tuple[str, int, str]] = field(default_factory=list)
    """(device, port, column) of narrow counters stuck at their maximum (see
    :data:`COUNTER_WIDTH_BITS`): the true count is at least that."""
    warnings: list[SourceError] = field(default_factory=list)


def infiniband_rows(page: ParsedPage, *, ts: datetime, node: str) -> InfinibandConversion:
    """Convert the ``node_infiniband_*`` series of a parsed node_exporter page.

    Args:
        page: a page parsed by :class:`hpcscope.ingest.exposition.parser.ExpositionParser`.
        ts: scrape time (naive UTC).
        node: the node the page belongs to.

    Returns:
        One row per (device, port) with every known counter; ports with no counters (only an
        ``info`` line) give no row.
    """
    ports: dict[tuple[str, int], dict[str, float]] = {}
    info: dict[str, dict[str, str]] = {}
    unknown: set[str] = set()
    warnings: list[SourceError] = []
    for series, value, _stamp in page.samples():
        if not series.name.startswith(PREFIX):
            continue
        family = series.name[len(PREFIX) :]
        labels = series.labels_dict()
        device = labels.get("device")
        if device is None:
            warnings.append(
                InfinibandFormatError(
                    "series without a device label: skipped", source=page.source, field=series.name
                )
            )
            continue
        if family == _INFO:
            info[device] = labels
            continue
        column = family
        if column not in _KNOWN:
            unknown.add(series.name)
            continue
        port_text = labels.get("port", "")
        if not port_text.isdigit() or int(port_text) > 32767:
            warnings.append(
                InfinibandFormatError(
                    f"port label {port_text!r} is not a port number: skipped",
                    source=page.source,
                    field=series.name,
                )
            )
            continue
        ports.setdefault((device, int(port_text)), {})[column] = value
    columns: dict[str, list[object]] = {name: [] for name in IB_PORT_SCHEMA.names}
    saturated: list[tuple[str, int, str]] = []
    for (device, port), values in sorted(ports.items()):
        details = info.get(device, {})
        columns["ts"].append(ts)
        columns["node"].append(node)
        columns["device"].append(device)
        columns["port"].append(port)
        columns["hca_type"].append(details.get("hca_type"))
        columns["firmware_version"].append(details.get("firmware_version"))
        columns["board_id"].append(details.get("board_id"))
        for gauge in ("state_id", "physical_state_id"):
            raw = values.get(gauge)
            columns[gauge].append(int(raw) if raw is not None and -128 <= raw < 128 else None)
        columns["rate_bytes_per_second"].append(values.get("rate_bytes_per_second"))
        for counter in IB_COUNTER_COLUMNS:
            reading = values.get(counter)
            columns[counter].append(reading)
            bits = COUNTER_WIDTH_BITS.get(counter)
            if bits is not None and reading == float(2**bits - 1):
                saturated.append((device, port, counter))
    table = pa.table(columns, schema=IB_PORT_SCHEMA)
    return InfinibandConversion(
        table=table, unknown_families=sorted(unknown), saturated=saturated, warnings=warnings
    )
