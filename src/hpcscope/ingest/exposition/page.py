"""What a parsed exposition page is: its series, its samples column-wise, its rejected lines.

:class:`~hpcscope.ingest.exposition.parser.ExpositionParser` builds these; the exporters'
converters read them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hpcscope.model.errors import SourceError


@dataclass(frozen=True, slots=True)
class Series:
    """One time series: metric name and labels, sorted by label name (the series identity)."""

    name: str
    labels: tuple[tuple[str, str], ...]

    def labels_dict(self) -> dict[str, str]:
        """The labels as a new dictionary."""
        return dict(self.labels)

    def label(self, name: str) -> str | None:
        """The value of label ``name``, or None when the series does not carry it."""
        for label, value in self.labels:
            if label == name:
                return value
        return None


class ExpositionError(SourceError):
    """A line of an exposition page that was rejected: target or file, line, column, why.

    ``field`` holds the metric name when the line got far enough to have one.
    """


@dataclass(slots=True)
class ParsedPage:
    """The samples of one page, column-wise, in page order.

    Containers are plain lists (fastest to build from C-level ``map`` and to hand to
    ``pyarrow.array``): ``series_ids[i]`` indexes :attr:`series`, ``values[i]`` is a float64,
    ``timestamps_ms[i]`` the sample's own timestamp in milliseconds or None (the usual case).
    ``types`` and ``helps`` map a family name from its ``# TYPE``/``# HELP`` line to the type
    (counter, gauge, histogram, summary, untyped) and the unescaped help text. ``errors`` holds
    the first ``max_errors`` rejected lines; ``rejected_lines`` counts all of them.
    """

    source: str
    series_ids: list[int]
    values: list[float]
    timestamps_ms: list[int | None]
    types: dict[str, str]
    helps: dict[str, str]
    errors: list[ExpositionError]
    series: Sequence[Series] = ()
    """The parser's series table these ids index (the same list object until it compacts)."""
    rejected_lines: int = 0
    new_series: int = 0
    """Series first met on this page (each cost a full parse of its line)."""
    lines: int = 0

    def __len__(self) -> int:
        return len(self.values)

    def samples(self) -> Iterator[tuple[Series, float, int | None]]:
        """Each sample as (series, value, timestamp in ms or None), in page order."""
        table = self.series
        for sid, value, stamp in zip(self.series_ids, self.values, self.timestamps_ms, strict=True):
            yield table[sid], value, stamp
