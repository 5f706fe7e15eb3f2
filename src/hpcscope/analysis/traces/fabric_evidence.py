"""Network evidence for a straggler from the InfiniBand port counters of its node.

The trace says *that* a rank's collectives are slow
(:mod:`hpcscope.analysis.traces.straggler_evidence`, "network"); the fabric says *why*: a port that
took errors (symbol errors, link error recoveries, a link that went down) or left
``ACTIVE``/``LinkUp`` during the profiled window. node_exporter reads these counters per HCA port
(``ib_port_counters``); every rank of a node shares that node's ports, so the comparison is node
against node: the straggler's node against the nodes of its peers (the other ranks' nodes, the
straggler's own node excluded).

Rules (counter increases over the window, resets handled as in
:func:`hpcscope.analysis.infiniband.port_rates`: a counter that went down restarted from 0):

* **supports**: the straggler's node has a port that was not ``ACTIVE``/``LinkUp`` in a read of
  the window, or its error increase is above zero and above every peer node's;
* **rules out**: its ports were up and took no more errors than its peers' nodes;
* nothing is said when every rank ran on one node (collectives stayed on NVLink: a single
  item says so) or when the straggler's node has no counters in the window (the caller notes it).

Error counters (IBTA PortCounters, as node_exporter names them): see :data:`ERROR_COUNTERS`.
``port_transmit_wait_total`` (ticks a port had data but no credit to send: congestion) is
reported as a figure, not judged: a slow rank makes its *peers'* ports wait, not its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from hpcscope.analysis.counters import bracket_reads
from hpcscope.analysis.infiniband import port_rates
from hpcscope.analysis.traces.straggler_evidence import Evidence

#: Counters that count faults on a link, with how a sentence names them.
ERROR_COUNTERS: dict[str, str] = {
    "symbol_error_total": "symbol errors",
    "link_error_recovery_total": "link error recoveries",
    "link_downed_total": "link downs",
    "port_errors_received_total": "receive errors",
    "port_receive_remote_physical_errors_total": "remote physical errors",
    "local_link_integrity_errors_total": "link integrity errors",
    "excessive_buffer_overrun_errors_total": "buffer overruns",
    "port_discards_transmitted_total": "transmit discards",
}
TRANSMIT_WAIT = "port_transmit_wait_total"
_PORT = ["node", "device", "port"]
#: ``state_id`` ACTIVE and ``physical_state_id`` LinkUp (IBTA PortInfo).
STATE_ACTIVE = 4
PHYSICAL_LINK_UP = 5


@dataclass(frozen=True, slots=True)
class NodeFabric:
    """One node's InfiniBand ports over a window.

    Attributes:
        node: the node.
        ports: ``device/port`` names read in the window.
        errors: increase of each error counter (summed over the node's ports) in the window.
        transmit_wait: increase of ``port_transmit_wait_total`` (ticks), None when unread.
        down_ports: ports seen not ``ACTIVE``/``LinkUp`` in a read of the window.
        saturated: error counters stuck at their maximum (their increase is unknown and not in
            ``errors``: the counter needs a reset, ``perfquery -x -R``).
        reads: port reads the figures rest on.
    """

    node: str
    ports: tuple[str, ...]
    errors: dict[str, float] = field(default_factory=dict)
    transmit_wait: float | None = None
    down_ports: tuple[str, ...] = ()
    saturated: tuple[str, ...] = ()
    reads: int = 0

    @property
    def error_total(self) -> float:
        return float(sum(self.errors.values()))


def bracket(counters: pl.DataFrame, start: datetime, end: datetime) -> pl.DataFrame:
    """Each port's reads from its last read at or before ``start`` to its first read at or
    after ``end`` (its first/last read when there is none): counters are read every scrape
    interval, so the increase over a window of a few seconds is the increase between the
    reads that bracket it."""
    return bracket_reads(counters, start, end, by=_PORT)


def node_fabric(
    counters: pl.DataFrame,
    *,
    window: tuple[datetime, datetime] | None = None,
    widths_bits: Mapping[str, int] | None = None,
) -> dict[str, NodeFabric]:
    """Summarise ``ib_port_counters`` rows per node.

    Args:
        counters: rows of :data:`~hpcscope.model.schemas.IB_PORT_SCHEMA` (any nodes).
        window: only the reads that bracket this window count (see :func:`bracket`); all
            reads when None.
        widths_bits: counter -> width in bits (the narrow IBTA counters saturate at
            ``2**bits - 1``; see :data:`hpcscope.ingest.exporters.infiniband.COUNTER_WIDTH_BITS`).

    Returns:
        ``{node: NodeFabric}`` for every node with at least one read; increases need two reads
        of a port (one read gives ports and states, no increase).
    """
    if window is not None:
        counters = bracket(counters, *window)
    if counters.height == 0:
        return {}
    port_name = pl.concat_str([pl.col("device"), pl.col("port").cast(pl.String)], separator="/")
    state = counters.with_columns(port_name.alias("port_name"))
    down = state.filter(
        (pl.col("state_id") != STATE_ACTIVE) | (pl.col("physical_state_id") != PHYSICAL_LINK_UP)
    )
    widths = dict(widths_bits or {})
    rates = port_rates(counters, widths_bits=widths)
    counted = [c for c in (*ERROR_COUNTERS, TRANSMIT_WAIT) if c in counters.columns]
    increases = rates.select(
        "node",
        *[
            (pl.col(c.removesuffix("_total") + "_per_second") * pl.col("interval_seconds"))
            .fill_null(0.0)
            .alias(c)
            for c in counted
        ],
    )
    sums = increases.group_by("node").agg(pl.col(c).sum() for c in counted)
    by_node = {row["node"]: row for row in sums.to_dicts()}
    stuck = state.select(
        "node",
        *[
            (pl.col(c) >= float(2 ** widths[c] - 1)).alias(c)
            for c in ERROR_COUNTERS
            if c in counters.columns and c in widths
        ],
    )
    out: dict[str, NodeFabric] = {}
    for node, rows in state.group_by("node"):
        name = str(node[0])
        totals = by_node.get(name, {})
        out[name] = NodeFabric(
            node=name,
            ports=tuple(sorted(set(rows["port_name"].to_list()))),
            errors={c: float(totals.get(c) or 0.0) for c in ERROR_COUNTERS if c in counted},
            transmit_wait=float(totals[TRANSMIT_WAIT])
            if TRANSMIT_WAIT in counted and totals.get(TRANSMIT_WAIT) is not None
            else None,
            down_ports=tuple(
                sorted(set(down.filter(pl.col("node") == name)["port_name"].to_list()))
            ),
            saturated=tuple(
                c for c in stuck.columns[1:] if bool(stuck.filter(pl.col("node") == name)[c].any())
            ),
            reads=rows.height,
        )
    return out


def _describe(errors: Mapping[str, float]) -> str:
    parts = [f"{value:,.0f} {ERROR_COUNTERS[name]}" for name, value in errors.items() if value > 0]
    return ", ".join(parts) if parts else "no error"


def fabric_evidence(
    stragglers: Sequence[int],
    rank_nodes: Mapping[int, str],
    fabric: Mapping[str, NodeFabric],
) -> dict[int, tuple[Evidence, ...]]:
    """Network evidence from the fabric for each straggler.

    Args:
        stragglers: the straggler ranks.
        rank_nodes: the node each analysed rank ran on (ranks that could not be placed are
            absent).
        fabric: the nodes' InfiniBand summaries over the analysed window (:func:`node_fabric`).

    Returns:
        ``{rank: evidence items}`` for the stragglers something can be said about.
    """
    out: dict[int, tuple[Evidence, ...]] = {}
    nodes = set(rank_nodes.values())
    for rank in stragglers:
        node = rank_nodes.get(rank)
        if node is None:
            continue
        if nodes == {node}:
            out[rank] = (
                Evidence(
                    "network",
                    False,
                    f"the InfiniBand fabric is not it: every rank ran on {node}, so the "
                    "collectives stayed on the node (NVLink)",
                    {"node": node, "source": "infiniband"},
                ),
            )
            continue
        own = fabric.get(node)
        if own is None:
            continue
        peers = [fabric[n] for n in sorted(nodes - {node}) if n in fabric]
        peer_errors = max((p.error_total for p in peers), default=0.0)
        figures: dict[str, float | int | str | None] = {
            "node": node,
            "source": "infiniband",
            "ports": len(own.ports),
            "errors": own.error_total,
            "peer_nodes": len(peers),
            "peers_max_errors": peer_errors,
            "transmit_wait_ticks": own.transmit_wait,
            **{name: value for name, value in own.errors.items() if value > 0},
        }
        if own.saturated:
            figures["saturated_counters"] = ", ".join(own.saturated)
        if own.down_ports:
            figures["down_ports"] = ", ".join(own.down_ports)
            out[rank] = (
                Evidence(
                    "network",
                    True,
                    f"InfiniBand port {', '.join(own.down_ports)} of {node} was not "
                    f"ACTIVE/LinkUp during the profiled window ({_describe(own.errors)} on "
                    "its ports): its traffic took fewer or slower links",
                    figures,
                ),
            )
        elif own.error_total > 0 and own.error_total > peer_errors:
            out[rank] = (
                Evidence(
                    "network",
                    True,
                    f"the InfiniBand ports of {node} took {_describe(own.errors)} during the "
                    f"profiled window, against at most {peer_errors:,.0f} on its peers' "
                    f"{len(peers)} node(s): a degraded link (cable, transceiver or switch "
                    "port) retransmits and slows every collective it carries",
                    figures,
                ),
            )
        else:
            caveat = (
                f"; {', '.join(ERROR_COUNTERS[c] for c in own.saturated)} stuck at the "
                "counter's maximum, so new ones are not counted (reset them: perfquery -x -R)"
                if own.saturated
                else ""
            )
            out[rank] = (
                Evidence(
                    "network",
                    False,
                    f"the InfiniBand links are not it: the {len(own.ports)} port(s) of {node} "
                    f"stayed up and took {_describe(own.errors)} during the profiled window "
                    f"(peers' nodes: at most {peer_errors:,.0f}){caveat}",
                    figures,
                ),
            )
    return out
