"""Prometheus text exposition (format 0.0.4) parser that caches series keys across scrapes.

Why our own: ``prometheus_client.parser.text_string_to_metric_families`` reads 12-19k samples/s
on one core here, below the 20,480 samples/s of a 1,024-GPU cluster scraped every second. A
target serves the same series scrape after scrape; only the values change. So the parser keeps,
per target, a dictionary from the *series key* (the text of a line before the space that
precedes its value) to a series id, and parses labels only the first time it meets a key.

Fast path, for a page whose series were all seen before: split the page into lines, split each
line at its last space, look the heads up in the key dictionary and convert the value tokens to
floats: each step is one C-level ``map`` over the page, with no Python bytecode per line. Every
line the dictionary does not know (comments, new series, timestamped samples, malformed lines)
goes through the exact line grammar of :mod:`hpcscope.ingest.exposition._syntax`, which also
names the column where a line goes wrong. A malformed line is reported and skipped; the rest of
the page is kept.

Samples are exactly those ``prometheus_client.parser`` returns on the pages both accept (the
property tests in ``tests/ingest/exposition/test_exposition_properties.py`` check it), except that
we keep the sample names as written, where ``prometheus_client`` appends ``_total`` to the samples
of a counter family whose name lacks it. Values are float64, as the format defines them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Any, cast

from hpcscope.ingest.exposition._syntax import (
    Labels,
    LineError,
    MetaLine,
    fast_values,
    parse_comment_line,
    parse_sample_line,
    parse_timestamp,
    parse_value,
)
from hpcscope.ingest.exposition.page import ExpositionError, ParsedPage, Series

__all__ = [
    "ExpositionError",
    "ExpositionParser",
    "ParsedPage",
    "Series",
    "parse_exposition",
]

_RPARTITION = str.rpartition
_HEAD = itemgetter(0)
_TAIL = itemgetter(2)
_META_CACHE_LIMIT = 10_000
_BLOCK_CACHE_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class _Layout:
    """The comment and blank lines of the last page, to recognise them on the next one."""

    line_count: int
    misses: int
    pick: itemgetter[Any]
    nones: tuple[None, ...]
    texts: tuple[str, ...]
    types: dict[str, str]
    helps: dict[str, str]
    errors: tuple[tuple[int, LineError], ...]


@dataclass(frozen=True, slots=True)
class _Steady:
    """The last page, when every line was known: what the next identical page maps to."""

    heads: list[str]
    mask: list[bool]
    fast_sids: list[int]
    layout: _Layout | None


class ExpositionParser:
    """Parser for one scrape target; remembers the target's series keys between pages.

    Not thread-safe: use one parser per target (the scraper does). The series table only grows
    until it holds more than ``compact_above`` series and four times the series of the current
    page (series churn, e.g. a new ``hpc_job`` per job); then it is rebuilt with the current
    page's series only, :attr:`generation` increases and ids are renumbered. Pages keep a
    reference to the table their ids index.
    """

    def __init__(self, *, max_errors: int = 100, compact_above: int = 200_000) -> None:
        self.series: list[Series] = []
        self.generation = 0
        self._keys: dict[str, int] = {}
        # each cached key's own string object (a steady page's heads point to it): kept as the
        # keys are, so that a page becoming steady costs its own lines, not the whole cache
        self._key_strings: dict[str, str] = {}
        self._index: dict[Series, int] = {}
        self._meta: dict[str, MetaLine | LineError] = {}
        self._layout: _Layout | None = None
        self._steady: _Steady | None = None
        self._strings: dict[str, str] = {}
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        self._label_sets: dict[Labels, Labels] = {}
        self._blocks: dict[str, Labels] = {}
        self._max_errors = max_errors
        self._compact_above = compact_above
        self._compact_at = compact_above

    def parse(self, text: str | bytes, *, source: str) -> ParsedPage:
        """Parse one page; malformed lines are reported in ``errors`` and skipped.

        Args:
            text: the page, as text or as UTF-8 bytes. CRLF line ends are accepted.
            source: the target URL or file name, used in error messages.
        """
        page = ParsedPage(source, [], [], [], {}, {}, [], self.series)
        if not isinstance(text, str):
            text = self._decode(bytes(text), page)
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        page.lines = len(lines)
        parts = list(map(_RPARTITION, lines, repeat(" ")))
        heads = list(map(_HEAD, parts))
        if self._steady_state(heads, lines, parts, page):
            return page
        sids: list[int | None] = list(map(self._keys.get, heads))
        slow: dict[int, tuple[int, float, int | None]] = {}
        misses = sids.count(None)
        if misses and not self._replay_layout(lines, sids, misses, page):
            meta_lines: list[int] = []
            find = sids.index
            i = 0
            while True:
                try:
                    i = find(None, i)
                except ValueError:
                    break
                if self._slow_line(i, lines[i], parts[i], slow, page):
                    meta_lines.append(i)
                i += 1
            self._remember_layout(lines, meta_lines, page)
        mask = list(map(is_not, sids, repeat(None)))
        fast_sids = cast(list[int], list(compress(sids, mask)))
        tokens = list(compress(map(_TAIL, parts), mask))
        values = fast_values(tokens)
        self._steady = None
        if values is None:
            self._exact_values(sids, lines, parts, slow, page)
            fast_sids, values = [], []
        elif not slow and (
            misses == 0 or (self._layout is not None and self._layout.misses == misses)
        ):
            # Every line known (no new series, no rejected line): the next page with the same
            # heads needs no look-up. Its heads are kept as the key cache's strings, no copy.
            shared = cast(list[str], list(map(self._key_strings.get, heads, heads)))
            self._steady = _Steady(shared, mask, fast_sids.copy(), self._layout if misses else None)
        if slow:
            self._merge(sids, fast_sids, values, slow, page)
        else:
            page.series_ids = fast_sids
            page.values = values
            page.timestamps_ms = [None] * len(values)
        if len(self.series) > self._compact_at:
            self._compact(page)
        page.series = self.series
        page.errors.sort(key=lambda error: error.line or 0)
        return page

    # -- the exact path ---------------------------------------------------------------------

    def _slow_line(
        self,
        i: int,
        line: str,
        part: tuple[str, str, str],
        slow: dict[int, tuple[int, float, int | None]],
        page: ParsedPage,
    ) -> bool:
        """A line the key dictionary did not know: comment, blank, new series, timestamp.

        Returns True for a comment or blank line (the page's layout), False for a sample line.
        """
        stripped = line.lstrip(" \t")
        if not stripped:
            return True
        if stripped[0] == "#":
            meta = self._meta.get(line)
            if meta is None:
                if len(self._meta) > _META_CACHE_LIMIT:
                    self._meta.clear()
                meta = self._meta[line] = parse_comment_line(line)
            self._apply_meta(i, meta, page)
            return True
        head, _, ts_token = part
        key, _, value_token = head.rpartition(" ")
        sid = self._keys.get(key)
        if sid is not None:  # a known series with a timestamp
            value = parse_value(value_token)
            stamp = parse_timestamp(ts_token)
            if value is not None and stamp is not None:
                slow[i] = (sid, value, stamp)
                return False
        if len(self._blocks) > _BLOCK_CACHE_LIMIT:
            self._blocks.clear()
        parsed = parse_sample_line(line, self._blocks)
        if isinstance(parsed, LineError):
            self._reject(i, parsed, page)
            return False
        series = Series(parsed.name, parsed.labels)
        sid = self._index.get(series)
        if sid is None:
            # Share equal strings and label pairs between series (a GPU's UUID and model name
            # repeat on every field): the key cache of a dcgm target is half the size.
            share = self._strings.setdefault
            labels = self._label_sets.get(parsed.labels)
            if labels is None:
                share_pair = self._pairs.setdefault
                pairs = [(share(k, k), share(v, v)) for k, v in parsed.labels]
                labels = tuple(share_pair(pair, pair) for pair in pairs)
                self._label_sets[labels] = labels
            series = Series(share(parsed.name, parsed.name), labels)
            sid = len(self.series)
            self.series.append(series)
            self._index[series] = sid
            page.new_series += 1
        if parsed.cache_key is not None:
            self._keys[parsed.cache_key] = sid
            self._key_strings[parsed.cache_key] = parsed.cache_key
        slow[i] = (sid, parsed.value, parsed.timestamp_ms)
        return False

    def _steady_state(
        self,
        heads: list[str],
        lines: list[str],
        parts: list[tuple[str, str, str]],
        page: ParsedPage,
    ) -> bool:
        """Fill ``page`` if it repeats the previous page but for its values (the usual case).

        Same heads in the same order means the same series ids and the same comment lines
        up to their last word, which is checked; then only the values are read.
        """
        steady = self._steady
        if steady is None or heads != steady.heads:
            return False
        layout = steady.layout
        if layout is not None and layout.pick(lines) != layout.texts:
            return False
        values = fast_values(list(compress(map(_TAIL, parts), steady.mask)))
        if values is None:
            return False
        page.series_ids = steady.fast_sids.copy()
        page.values = values
        page.timestamps_ms = [None] * len(values)
        if layout is not None:
            self._apply_layout(layout, page)
        page.series = self.series
        page.errors.sort(key=lambda error: error.line or 0)
        return True

    def _replay_layout(
        self, lines: list[str], sids: list[int | None], misses: int, page: ParsedPage
    ) -> bool:
        """Reuse the last page's comments if this page has them at the same lines.

        A target repeats its ``# HELP``/``# TYPE`` lines scrape after scrape: when the lines the
        key dictionary missed are exactly the comment and blank lines of the previous page,
        unchanged, their metadata (and any errors they carried) is copied instead of reparsed.
        """
        layout = self._layout
        if (
            layout is None
            or layout.misses != misses
            or layout.line_count != len(lines)
            or layout.pick(sids) != layout.nones
            or layout.pick(lines) != layout.texts
        ):
            return False
        self._apply_layout(layout, page)
        return True

    def _apply_layout(self, layout: _Layout, page: ParsedPage) -> None:
        page.types.update(layout.types)
        page.helps.update(layout.helps)
        for i, error in layout.errors:
            self._reject(i, error, page)

    def _remember_layout(self, lines: list[str], meta_lines: list[int], page: ParsedPage) -> None:
        if len(meta_lines) < 2 or page.rejected_lines > len(page.errors):
            # itemgetter of one index returns a bare item, not a tuple; and a page whose errors
            # were capped cannot be replayed exactly.
            self._layout = None
            return
        pick = itemgetter(*meta_lines)
        texts = pick(lines)
        on_meta_line = {i for i in meta_lines if lines[i]}
        self._layout = _Layout(
            line_count=len(lines),
            misses=len(meta_lines),
            pick=pick,
            nones=(None,) * len(meta_lines),
            texts=texts,
            types=dict(page.types),
            helps=dict(page.helps),
            errors=tuple(
                (error.line - 1, LineError(error.column or 1, error.message, error.field))
                for error in page.errors
                if error.line is not None and error.line - 1 in on_meta_line
            ),
        )

    def _apply_meta(self, i: int, meta: MetaLine | LineError, page: ParsedPage) -> None:
        if isinstance(meta, LineError):
            self._reject(i, meta, page)
        elif meta.kind == "TYPE":
            if meta.family in page.types:
                self._reject(i, LineError(1, "second TYPE line for this family", meta.family), page)
            else:
                page.types[meta.family] = meta.text
        elif meta.kind == "HELP":
            if meta.family in page.helps:
                self._reject(i, LineError(1, "second HELP line for this family", meta.family), page)
            else:
                page.helps[meta.family] = meta.text

    def _reject(self, i: int, error: LineError, page: ParsedPage) -> None:
        page.rejected_lines += 1
        if len(page.errors) < self._max_errors:
            page.errors.append(
                ExpositionError(
                    error.message,
                    source=page.source,
                    line=i + 1,
                    column=error.column,
                    field=error.metric,
                )
            )

    def _exact_values(
        self,
        sids: list[int | None],
        lines: list[str],
        parts: list[tuple[str, str, str]],
        slow: dict[int, tuple[int, float, int | None]],
        page: ParsedPage,
    ) -> None:
        """Value tokens the fast check did not clear: read each one exactly, line by line."""
        for i, sid in enumerate(sids):
            if sid is None:
                continue
            value = parse_value(parts[i][2])
            if value is not None:
                slow[i] = (sid, value, None)
            else:  # e.g. a tab before a timestamp, or a bad value: parse the whole line
                self._slow_line(i, lines[i], ("", "", ""), slow, page)
            sids[i] = None

    def _merge(
        self,
        sids: list[int | None],
        fast_sids: list[int],
        fast_vals: list[float],
        slow: dict[int, tuple[int, float, int | None]],
        page: ParsedPage,
    ) -> None:
        """Interleave fast and slow samples back into page order."""
        out_sids = page.series_ids
        out_values = page.values
        out_stamps = page.timestamps_ms
        fast = 0
        for i, sid in enumerate(sids):
            if sid is not None:
                out_sids.append(fast_sids[fast])
                out_values.append(fast_vals[fast])
                out_stamps.append(None)
                fast += 1
            else:
                sample = slow.get(i)
                if sample is not None:
                    out_sids.append(sample[0])
                    out_values.append(sample[1])
                    out_stamps.append(sample[2])

    def _decode(self, data: bytes, page: ParsedPage) -> str:
        """UTF-8 text of the page; a line with invalid UTF-8 is reported and blanked."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        decoded: list[str] = []
        for i, raw in enumerate(data.split(b"\n")):
            try:
                decoded.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
                self._reject(
                    i, LineError(column, f"invalid UTF-8 byte 0x{raw[exc.start]:02x}"), page
                )
                decoded.append("")
        return "\n".join(decoded)

    def _compact(self, page: ParsedPage) -> None:
        live = sorted(set(page.series_ids))
        # Look again only once the table has doubled: a target that really serves this many
        # series is not re-examined on every scrape.
        self._compact_at = max(self._compact_above, 2 * len(self.series))
        if len(self.series) <= 4 * len(live):
            return
        self._compact_at = max(self._compact_above, 2 * len(live))
        renumber = {old: new for new, old in enumerate(live)}
        self.series = [self.series[old] for old in live]
        self._index = {series: sid for sid, series in enumerate(self.series)}
        self._strings = {}
        self._pairs = {}
        self._label_sets = {}
        self._blocks = {}
        self._keys = {key: renumber[sid] for key, sid in self._keys.items() if sid in renumber}
        self._key_strings = {key: key for key in self._keys}
        page.series_ids = [renumber[sid] for sid in page.series_ids]
        self._steady = None
        self.generation += 1


def parse_exposition(
    text: str | bytes, *, source: str = "<text>"
) -> tuple[list[tuple[str, dict[str, str], float, float | None]], list[ExpositionError]]:
    """Parse a page in one go: samples as (name, labels, value, timestamp in seconds or None).

    The convenience form for tests and one-off reads; scrapers keep an
    :class:`ExpositionParser` per target so the second page is parsed from the key cache.
    """
    page = ExpositionParser().parse(text, source=source)
    samples = [
        (series.name, series.labels_dict(), value, None if stamp is None else stamp / 1000)
        for series, value, stamp in page.samples()
    ]
    return samples, page.errors
