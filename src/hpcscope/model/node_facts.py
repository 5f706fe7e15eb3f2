"""Arrow schemas of two node facts the security rules read (migration 16).

* ``gpu_xid_counts``: dcgm-exporter's ``DCGM_EXP_XID_ERRORS_COUNT{xid="..."}``, the number of
  Xid errors of one code a GPU reported within the exporter's window
  (``--xid-count-window-size``, milliseconds), one row per (scrape, GPU, Xid code, job). GM-4.
* ``node_posture``: what a node's daily posture check wrote for node_exporter's textfile
  collector (``hpcscope_posture_*`` series, ``deploy/posture/``), one row per fact and check.
  SC-7, CE-5, GM-5, DP-3.
"""

from __future__ import annotations

import pyarrow as pa

from hpcscope.model.schemas import TS

GPU_XID_COUNT_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("job_id", pa.string()),
        pa.field("xid", pa.int32(), nullable=False),
        pa.field("xid_count", pa.float64(), nullable=False),
    ]
)
"""Xids of one code on one GPU within the exporter's window, at one scrape.

``job_id`` is the series' ``hpc_job`` label (null when it names no job)."""

NODE_POSTURE_SCHEMA = pa.schema(
    [
        pa.field("ts", TS, nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("checked_at", TS, nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
    ]
)
"""One fact of one node's posture check.

``ts`` is when hpcscope read it (the scrape), ``checked_at`` when the check ran
(``hpcscope_posture_checked_timestamp_seconds``). ``kind``: ``version`` (``name`` a package or
binary, ``value`` its version), ``flag`` (``name`` a fact, ``value`` ``"1"`` or ``"0"``) or
``dataset`` (``name`` a dataset root, ``value`` ``"1"`` when its URL list carries per-item
hashes, ``"0"`` when not; ``detail`` the URL list)."""

#: The kinds of ``node_posture`` rows.
POSTURE_KINDS: tuple[str, ...] = ("version", "flag", "dataset")
