"""Node facts of a scraped page, stored beside its GPU or port rows (migration 16).

A dcgm-exporter page's ``DCGM_EXP_XID_ERRORS_COUNT`` series go to ``gpu_xid_counts`` (GM-4);
a node_exporter page's ``hpcscope_posture_*`` series (the daily posture check's textfile,
``deploy/posture/``) to ``node_posture`` (SC-7, CE-5, GM-5, DP-3). The telemetry rules read
both after each cycle (``service/telemetry_rules/engine.py``). A series that cannot be read is
logged with its page, and the page's other rows are stored.
"""

from __future__ import annotations

import logging
from datetime import datetime

from hpcscope.ingest.exporters.node_facts import (
    FactSeries,
    is_posture,
    is_xid_count,
    posture_rows,
    xid_count_rows,
)
from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.ingest.exposition.targets import Target
from hpcscope.store import Store
from hpcscope.store.node_facts import append_posture, append_xid_counts

log = logging.getLogger(__name__)


def fact_series(exporter: str) -> FactSeries:
    """A new :class:`FactSeries` for the facts of an ``exporter``'s pages (one per target)."""
    return FactSeries(is_xid_count if exporter == "dcgm" else is_posture)


def store_node_facts(
    store: Store,
    target: Target,
    page: ParsedPage,
    *,
    ts: datetime,
    picker: FactSeries | None = None,
) -> int:
    """Store the Xid counts (a ``dcgm`` target) or the posture facts (``node``) of one page
    (the target's ``node`` label, else its URL, names the node); returns the rows handed to
    the store (written on its writer thread). ``picker``: the target's :func:`fact_series`,
    which remembers where its pages hold the facts (None: every sample is looked at)."""
    node = target.labels.get("node") or target.url
    return store_page_facts(store, target.exporter, page, ts=ts, node=node, picker=picker)


def store_page_facts(
    store: Store,
    exporter: str,
    page: ParsedPage,
    *,
    ts: datetime,
    node: str,
    picker: FactSeries | None = None,
) -> int:
    """:func:`store_node_facts` for a page of ``exporter`` (``dcgm`` or ``node``) from
    ``node`` (the replay of twin scenarios calls it as the collector does)."""
    if exporter == "dcgm":
        rows = xid_count_rows(page, ts=ts, node=node, picker=picker)
        if rows.table.num_rows:
            append_xid_counts(store, rows.table)
    else:
        rows = posture_rows(page, ts=ts, node=node, picker=picker)
        if rows.table.num_rows:
            append_posture(store, rows.table)
    for error in rows.errors[:5]:
        log.warning("node facts: %s", error)
    return int(rows.table.num_rows)
