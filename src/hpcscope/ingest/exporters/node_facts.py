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
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.model.errors import SourceError
from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA, NODE_POSTURE_SCHEMA
from hpcscope.model.sampling import job_id_from_label
from hpcscope.model.timeutil import from_epoch_seconds

__all__ = ["POSTURE_PREFIX", "XID_COUNT", "FactRows", "posture_rows", "xid_count_rows"]

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


def xid_count_rows(page: ParsedPage, *, ts: datetime, node: str) -> FactRows:
    """The ``DCGM_EXP_XID_ERRORS_COUNT`` series of a dcgm-exporter page (module docstring)."""
    rows: list[dict[str, object]] = []
    errors: list[NodeFactError] = []
    for series, value, _ in page.samples():
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
    return FactRows(pa.Table.from_pylist(rows, schema=GPU_XID_COUNT_SCHEMA), tuple(errors))


def posture_rows(page: ParsedPage, *, ts: datetime, node: str) -> FactRows:
    """The ``hpcscope_posture_*`` series of a node_exporter page (module docstring)."""
    checked = ts
    facts: list[tuple[str, str, str, str | None]] = []
    errors: list[NodeFactError] = []
    for series, value, _ in page.samples():
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
    return FactRows(pa.Table.from_pylist(rows, schema=NODE_POSTURE_SCHEMA), tuple(errors))
