"""Two node facts from pages the collector already scrapes (``model/node_facts.py``).

Xid counts (dcgm-exporter): ``DCGM_EXP_XID_ERRORS_COUNT{gpu="3",...,xid="43"} 25`` is the number
of Xid 43 errors GPU 3 reported within the exporter's window (``--xid-count-window-size`` in
milliseconds; hpcscope's GM-4 wants 120000, two minutes). The exporter synthesises it when the
collectors CSV enables it (``deploy/dcgm-exporter/``); ``DCGM_FI_DEV_XID_ERRORS`` is only the
last code. :func:`xid_count_rows` gives one row per series with its ``hpc_job``.

Posture (node_exporter's textfile collector): the daily check of ``deploy/posture/`` writes
``hpcscope_posture.prom`` into the textfile directory (Debian's
``/var/lib/prometheus/node-exporter``), and node_exporter serves it with its other series::

    hpcscope_posture_checked_timestamp_seconds 1796126400
    hpcscope_posture_version_info{package="runc",version="1.1.11"} 1
    hpcscope_posture_flag{flag="setuid_apptainer"} 0
    hpcscope_posture_dataset_item_hashes{root="/lustre/datasets/web",url_list=".../urls.tsv"} 0

:func:`posture_rows` gives one row per fact. A series without the labels its kind needs, or an
Xid label that is not a number, is an error naming the page and series; the other rows stand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.exposition.parser import ParsedPage, Series
from hpcscope.model.errors import SourceError
from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA, NODE_POSTURE_SCHEMA
from hpcscope.model.sampling import job_id_from_label
from hpcscope.model.timeutil import from_epoch_seconds

__all__ = [
    "POSTURE_PREFIX",
    "XID_COUNT",
    "FactRows",
    "FactSeries",
    "posture_rows",
    "xid_count_rows",
]

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
POSTURE_PREFIX = "hpcscope_posture_"
_CHECKED = POSTURE_PREFIX + "checked_timestamp_seconds"
_KINDS = {
    POSTURE_PREFIX + "version_info": ("version", "package", "version"),
    POSTURE_PREFIX + "flag": ("flag", "flag", None),
    POSTURE_PREFIX + "dataset_item_hashes": ("dataset", "root", None),
}


class NodeFactError(SourceError):
    """A series of a page that cannot be read as a node fact."""


@dataclass(frozen=True, slots=True)
class FactRows:
    """Rows of one page (an empty table when the page has none) and the series rejected."""

    table: pa.Table
    errors: tuple[NodeFactError, ...] = field(default=())


class FactSeries:
    """Where a target's pages hold the series of one kind of fact, remembered between pages.

    A page is hundreds of samples and its facts a handful, or none (a GPU with no Xid); looking
    at every sample's name in Python cost 0.1 ms a page, 13 ms a second for a 1,024-GPU
    cluster scraped every second. This learns which series ids of the target's parser table
    are wanted (each new id once) and which page positions hold them (again only when the
    page's series ids change): a page like the previous one costs one list comparison. Use one
    per target (its parser's table).

    Args:
        wanted: whether a series name is a fact of this kind.
    """

    def __init__(self, wanted: Callable[[str], bool]) -> None:
        self._wanted = wanted
        self._table: Sequence[Series] | None = None
        self._learned = 0
        self._sids: set[int] = set()
        self._ids: list[int] | None = None
        self._positions: list[int] = []

    def positions(self, page: ParsedPage) -> list[int]:
        """Positions in ``page`` of the wanted series, in page order."""
        table = page.series
        if table is not self._table:  # another parser, or its table was compacted
            self._table, self._learned, self._sids, self._ids = table, 0, set(), None
        if len(table) > self._learned:
            wanted = self._wanted
            self._sids.update(s for s in range(self._learned, len(table)) if wanted(table[s].name))
            self._learned = len(table)
            self._ids = None
        if not self._sids:
            return []
        if self._ids != page.series_ids:
            self._ids = list(page.series_ids)
            sids = self._sids
            self._positions = [i for i, sid in enumerate(self._ids) if sid in sids]
        return self._positions


def is_xid_count(name: str) -> bool:
    """Whether a series name is dcgm-exporter's Xid count (:func:`xid_count_rows`)."""
    return name == XID_COUNT


def is_posture(name: str) -> bool:
    """Whether a series name is one of the posture check's (:func:`posture_rows`)."""
    return name.startswith(POSTURE_PREFIX)


def _samples(page: ParsedPage, positions: Sequence[int] | None) -> Iterator[tuple[Series, float]]:
    if positions is None:
        for series, value, _ in page.samples():
            yield series, value
        return
    table, sids, values = page.series, page.series_ids, page.values
    for i in positions:
        yield table[sids[i]], values[i]


def xid_count_rows(
    page: ParsedPage, *, ts: datetime, node: str, picker: FactSeries | None = None
) -> FactRows:
    """The ``DCGM_EXP_XID_ERRORS_COUNT`` series of a dcgm-exporter page (module docstring).

    Args:
        picker: the target's :class:`FactSeries` of :func:`is_xid_count` (None: look at every
            sample of the page).
    """
    rows: list[dict[str, object]] = []
    errors: list[NodeFactError] = []
    for series, value in _samples(page, None if picker is None else picker.positions(page)):
        if series.name != XID_COUNT:
            continue
        gpu, xid = series.label("gpu"), series.label("xid")
        if gpu is None or xid is None or not gpu.isdigit() or not xid.isdigit():
            errors.append(
                NodeFactError(
                    f"gpu={gpu!r} xid={xid!r}: want decimal gpu and xid labels",
                    source=page.source,
                    field=XID_COUNT,
                )
            )
            continue
        if not math.isfinite(value) or value < 0:
            continue
        job = job_id_from_label(series.label("hpc_job"))
        rows.append({"ts": ts, "node": node, "gpu": int(gpu), "job_id": job, "xid": int(xid),
                     "xid_count": value})  # fmt: skip
    return FactRows(_table(rows, GPU_XID_COUNT_SCHEMA), tuple(errors))


def posture_rows(
    page: ParsedPage, *, ts: datetime, node: str, picker: FactSeries | None = None
) -> FactRows:
    """The ``hpcscope_posture_*`` series of a node_exporter page (module docstring).

    Args:
        picker: the target's :class:`FactSeries` of :func:`is_posture` (None: every sample).
    """
    checked = ts
    facts: list[tuple[str, str, str, str | None]] = []
    errors: list[NodeFactError] = []
    for series, value in _samples(page, None if picker is None else picker.positions(page)):
        if not series.name.startswith(POSTURE_PREFIX):
            continue
        if series.name == _CHECKED:
            if math.isfinite(value) and 0 < value < 1e11:  # seconds, not ms or garbage
                checked = from_epoch_seconds(value)
            continue
        kind = _KINDS.get(series.name)
        if kind is None:
            continue  # a later check's series: not known to this version
        name_label, value_label = kind[1], kind[2]
        name = series.label(name_label)
        text = series.label(value_label) if value_label else ("1" if value >= 0.5 else "0")
        if not name or not text:
            want = name_label if value_label is None else f"{name_label} and {value_label}"
            errors.append(
                NodeFactError(f"needs {want} labels", source=page.source, field=series.name)
            )
            continue
        if kind[0] == "version" and value < 0.5:
            continue  # an info series at 0 says "not installed"
        facts.append((kind[0], name, text, series.label("url_list")))
    rows = [
        {"ts": ts, "node": node, "checked_at": checked, "kind": k, "name": n, "value": v,
         "detail": d}
        for k, n, v, d in facts
    ]  # fmt: skip
    return FactRows(_table(rows, NODE_POSTURE_SCHEMA), tuple(errors))


_EMPTY = {
    GPU_XID_COUNT_SCHEMA: GPU_XID_COUNT_SCHEMA.empty_table(),
    NODE_POSTURE_SCHEMA: NODE_POSTURE_SCHEMA.empty_table(),
}


def _table(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    # a page without facts (the usual case) shares one empty table: from_pylist costs 60 us
    return pa.Table.from_pylist(list(rows), schema=schema) if rows else _EMPTY[schema]
