"""Errors that name where bad input came from.

Every parser in hpcscope reports a problem as a :class:`SourceError`: the source (a file path,
a scrape target URL, a command), and where known the line and column (1-based) and the field.
The message is written for the operator who has to fix the input, not for us.

::

    SourceError
     ├── TopologyError        (topology YAML: file, line, field)
     └── (ingest errors subclass it: ExpositionError, SchedulerFormatError, TraceError, ...)
"""

from __future__ import annotations


class SourceError(ValueError):
    """Bad input, with its source and position."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        """Render as ``source:line:column: field: message`` with the parts that are known."""
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        prefix = f"{where}: "
        if self.field:
            prefix += f"{self.field}: "
        return prefix + self.message

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view for ``--json`` output and API error bodies."""
        return {
            "message": self.message,
            "source": self.source,
            "line": self.line,
            "column": self.column,
            "field": self.field,
        }


class TopologyError(SourceError):
    """A topology file that cannot describe a cluster."""
