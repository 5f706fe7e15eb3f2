"""Stored trace analyses: the table row and its Arrow schema.

One row per analysis of a set of per-rank profiler traces: who ran it, the job it is linked to
(if any, and only one the owner may see), when, from which files, the headline figures, the
profiled window in UTC, and the whole ``hpcscope.traces.analysis/1`` JSON document.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

TRACE_ANALYSIS_SCHEMA = pa.schema(
    [
        pa.field("analysis_id", pa.string(), nullable=False),
        pa.field("owner_user", pa.string(), nullable=False),
        pa.field("owner_accounts", pa.list_(pa.string()), nullable=False),
        pa.field("job_id", pa.string()),
        pa.field("account", pa.string()),
        pa.field("created", pa.timestamp("us"), nullable=False),
        pa.field("source_names", pa.list_(pa.string()), nullable=False),
        pa.field("ranks", pa.int32(), nullable=False),
        pa.field("steps", pa.int32(), nullable=False),
        pa.field("partial", pa.bool_(), nullable=False),
        pa.field("slowdown", pa.float64()),
        pa.field("straggler_ranks", pa.list_(pa.int32()), nullable=False),
        pa.field("window_start", pa.timestamp("us")),
        pa.field("window_end", pa.timestamp("us")),
        pa.field("result_json", pa.string(), nullable=False),
    ]
)
"""``account`` is the linked job's account (NULL when unlinked); ``owner_accounts`` the
accounts the owner belonged to when the analysis was made. Visibility: the owner, admins, and
team leads who coordinate ``account`` or one of ``owner_accounts``."""


@dataclass(frozen=True, slots=True)
class StoredAnalysis:
    """One row of ``trace_analyses`` (``result_json`` kept as text until asked for)."""

    analysis_id: str
    owner_user: str
    owner_accounts: tuple[str, ...]
    job_id: str | None
    account: str | None
    created: datetime
    source_names: tuple[str, ...]
    ranks: int
    steps: int
    partial: bool
    slowdown: float | None
    straggler_ranks: tuple[int, ...]
    window_start: datetime | None
    window_end: datetime | None
    result_json: str
