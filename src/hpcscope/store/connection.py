"""How the store opens its DuckDB file, and what DuckDB's memory holds.

Two of DuckDB's settings decide the store's memory in a long-running server:

- ``memory_limit``: the most DuckDB's buffer manager holds (the blocks of the file it read or
  wrote, the rows appended since the last checkpoint, the queries' hash tables and sorts).
  Under it DuckDB keeps every block it touched; at it, it evicts the least recently used and
  spills a query's intermediates to ``<store>.tmp``. DuckDB's default is 80 % of the host's
  RAM, so a server left to it keeps every block of the store it touched, up to that.
- ``checkpoint_threshold``: the size of write-ahead log at which DuckDB checkpoints, turning
  the rows appended in memory into compressed blocks. The rows waiting for it are the height
  of the store's memory saw (at 128 nodes, 16 MiB of log is 20-36 MiB of rows and ~5 minutes).

:class:`StoreLimits` carries both (``store_memory_limit_bytes`` and
``store_checkpoint_threshold_bytes`` in the settings, docs/storage.md);
:func:`memory_by_tag` reads what the buffer manager holds, for the server's ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from hpcscope.model.errors import StoreError

#: DuckDB's own default, 16 MiB of write-ahead log: at 128 nodes a checkpoint about every 5.5
#: minutes, 20-36 MiB of rows waiting for it. 4 MiB cut that to 3-6 MiB every ~80 s, and the
#: soak's throughput by 12 % in one 3-minute run each (1,453 against 1,658 requests a second).
DEFAULT_CHECKPOINT_THRESHOLD_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """DuckDB's memory settings for one store.

    Args:
        memory_limit_bytes: DuckDB's ``memory_limit``; None keeps DuckDB's default (80 % of
            the host's RAM).
        checkpoint_threshold_bytes: DuckDB's ``checkpoint_threshold`` (write-ahead log bytes).
    """

    memory_limit_bytes: int | None = None
    checkpoint_threshold_bytes: int = DEFAULT_CHECKPOINT_THRESHOLD_BYTES

    def __post_init__(self) -> None:
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise ValueError(f"memory_limit_bytes must be > 0, not {self.memory_limit_bytes}")
        if self.checkpoint_threshold_bytes <= 0:
            raise ValueError(
                f"checkpoint_threshold_bytes must be > 0, not {self.checkpoint_threshold_bytes}"
            )

    def config(self) -> dict[str, str | bool | int | float | list[str]]:
        """DuckDB's connection config (sizes in bytes, DuckDB's ``B`` unit)."""
        config: dict[str, str | bool | int | float | list[str]]
        config = {"checkpoint_threshold": f"{self.checkpoint_threshold_bytes}B"}
        if self.memory_limit_bytes is not None:
            config["memory_limit"] = f"{self.memory_limit_bytes}B"
        return config


@dataclass(frozen=True, slots=True)
class StoreMemory:
    """What DuckDB's buffer manager holds now (``duckdb_memory()``)."""

    by_tag_bytes: dict[str, int]  # every tag DuckDB has: BASE_TABLE, IN_MEMORY_TABLE, ...
    temporary_bytes: int  # spilled to <store>.tmp
    limit_bytes: int  # memory_limit in effect

    @property
    def total_bytes(self) -> int:
        return sum(self.by_tag_bytes.values())


def connect(path: str, *, read_only: bool, limits: StoreLimits) -> duckdb.DuckDBPyConnection:
    """Open the store's file (its folder created for a writer) with ``limits``."""
    if path != ":memory:" and not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return duckdb.connect(path, read_only=read_only, config=limits.config())
    except duckdb.Error as exc:  # locked, unreadable, not a DuckDB file, corrupt
        hint = ""
        if "not a valid DuckDB" in str(exc) or "orrupt" in str(exc):
            hint = " (docs/storage.md, 'A corrupt store')"
        raise StoreError(f"cannot open store {path}: {exc}{hint}") from None


def memory_by_tag(cursor: duckdb.DuckDBPyConnection) -> StoreMemory:
    """What the buffer manager holds, by DuckDB's tag, and its limit."""
    rows = cursor.execute(
        "SELECT tag, memory_usage_bytes, temporary_storage_bytes FROM duckdb_memory()"
    ).fetchall()
    return StoreMemory(
        by_tag_bytes={str(tag): int(used or 0) for tag, used, _ in rows},
        temporary_bytes=sum(int(spilled or 0) for _, _, spilled in rows),
        limit_bytes=_limit_bytes(cursor),
    )


_UNITS = {"B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}
_UNITS |= {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def _limit_bytes(cursor: duckdb.DuckDBPyConnection) -> int:
    """``memory_limit`` in bytes: DuckDB shows it as text (``18.8 GiB``, three digits)."""
    rows = cursor.execute("SELECT current_setting('memory_limit')").fetchall()
    text = str(rows[0][0] if rows else "").strip()
    number = text.rstrip("BKMGTi ")
    unit = text[len(number) :].strip()
    try:
        return round(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise StoreError(f"DuckDB's memory_limit {text!r} is not a size") from None


def file_size_bytes(path: str) -> int:
    """Bytes on disk: the database file and its write-ahead log (0 for ``:memory:``)."""
    if path == ":memory:":
        return 0
    total = 0
    for name in (Path(path), Path(f"{path}.wal")):
        try:
            total += name.stat().st_size
        except FileNotFoundError:
            pass
    return total
