"""A WHERE clause assembled from optional filters, with its bound parameters.

Store queries take optional filters (these nodes, these jobs, from ``since`` to ``until``); each
one present adds a clause and its parameter, in order. One builder instead of the same
``if x is not None: clauses.append(...); params.append(...)`` in every query module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Where:
    """Clauses joined with AND; values always bound as parameters, never formatted in."""

    clauses: list[str] = field(default_factory=list)
    params: list[object] = field(default_factory=list)

    def equals(self, column: str, value: object | None) -> Where:
        """``column = value`` when ``value`` is not None."""
        if value is not None:
            self.clauses.append(f"{column} = ?")
            self.params.append(value)
        return self

    def among(self, column: str, values: Sequence[str] | None) -> Where:
        """``column`` is one of ``values`` when they are given (an empty list matches none)."""
        if values is not None:
            if not values:
                self.clauses.append("FALSE")
            else:
                self.clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                self.params.extend(values)
        return self

    def window(
        self, since: datetime | None, until: datetime | None, *, column: str = "ts"
    ) -> Where:
        """``since <= column <= until``, each bound when given."""
        if since is not None:
            self.clauses.append(f"{column} >= ?")
            self.params.append(since)
        if until is not None:
            self.clauses.append(f"{column} <= ?")
            self.params.append(until)
        return self

    def sql(self) -> str:
        """``WHERE ...``, or an empty string when no filter was given."""
        return f"WHERE {' AND '.join(self.clauses)}" if self.clauses else ""
