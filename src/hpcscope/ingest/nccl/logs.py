"""A training job's log -> NCCL records, PyTorch watchdog events, nccl-tests results.

One pass over the lines: each line loses its launcher prefixes
(:mod:`hpcscope.ingest.nccl.log_prefix`), then is offered, in turn, to the NCCL line parser, the
PyTorch ``ProcessGroupNCCL`` parser, the nccl-tests reader and the Megatron StragglerDetector
parser. A line none of them knows is counted as unknown (the first few are kept to show the
user), never fatal: real logs interleave everything a job prints. Bytes that are not UTF-8 are
replaced and reported with their line and column.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from hpcscope.ingest.nccl.lines import parse_nccl_line
from hpcscope.ingest.nccl.log_prefix import strip_launcher_prefix
from hpcscope.ingest.nccl.megatron_straggler import (
    StragglerExtreme,
    ThroughputRanking,
    parse_straggler_line,
)
from hpcscope.ingest.nccl.nccl_tests import NcclTestsReader, NcclTestsResult
from hpcscope.ingest.nccl.pytorch_watchdog import STACK_LINE, parse_watchdog_line
from hpcscope.model.collectives import WatchdogEvent, WatchdogKind
from hpcscope.model.errors import SourceError
from hpcscope.model.nccl import LineRef, NcclRecord

#: Unknown lines kept verbatim per file, to show what was not understood.
UNKNOWN_SAMPLES = 5
#: Longest line offered to the parsers (NCCL, PyTorch and Megatron lines are under 4 KiB): their
#: regular expressions search, and a search over one line costs up to its length squared (a
#: 2 MB line of binary took 32 s). A longer line is counted unknown, with one warning.
MAX_LINE_CHARS = 16 * 1024


class NcclLogError(SourceError):
    """A log file that cannot be read at all (missing, unreadable, a directory)."""


@dataclass(slots=True)
class NcclLogParse:
    """Everything read from one log file.

    Attributes:
        source: the file (or the name given for text).
        lines: lines in the file; ``blank_lines`` of them empty.
        unknown_lines: lines no parser recognised; ``unknown_samples`` the first few
            ``(line, text)``.
        nccl: NCCL records in file order (a ``Trees`` line gives one record per channel).
        watchdog: PyTorch ``ProcessGroupNCCL`` events in file order.
        nccl_tests: nccl-tests results (one per header found).
        stragglers: Megatron StragglerDetector min/max pairs and throughput rankings.
        launcher_ranks: line -> the rank a launcher prefix (``0: ``, ``[1,0]<stdout>:``) named.
        warnings: problems that did not stop the parse (bad bytes), with line and column.
    """

    source: str
    lines: int = 0
    blank_lines: int = 0
    unknown_lines: int = 0
    unknown_samples: list[tuple[int, str]] = field(default_factory=list)
    nccl: list[NcclRecord] = field(default_factory=list)
    watchdog: list[WatchdogEvent] = field(default_factory=list)
    nccl_tests: list[NcclTestsResult] = field(default_factory=list)
    stragglers: list[StragglerExtreme | ThroughputRanking] = field(default_factory=list)
    launcher_ranks: dict[int, int] = field(default_factory=dict)
    warnings: list[SourceError] = field(default_factory=list)

    @property
    def parsed_lines(self) -> int:
        """Lines some parser recognised."""
        return self.lines - self.blank_lines - self.unknown_lines


def read_nccl_log(path: Path) -> NcclLogParse:
    """Read and parse one log file.

    Raises:
        NcclLogError: the file cannot be opened or read.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NcclLogError(f"cannot read: {exc.strerror or exc}", source=str(path)) from exc
    return parse_nccl_log_bytes(data, source=str(path))


def parse_nccl_log_bytes(data: bytes, *, source: str) -> NcclLogParse:
    """Parse log bytes; invalid UTF-8 is replaced and reported (line, column), never fatal."""
    text = data.decode("utf-8", errors="replace")
    result = parse_nccl_log_text(text, source=source)
    if "\ufffd" in text and b"\xef\xbf\xbd" not in data:
        for number, line in enumerate(_lines(text), start=1):
            column = line.find("\ufffd")
            if column >= 0:
                result.warnings.append(
                    NcclLogError(
                        "bytes that are not UTF-8 were replaced",
                        source=source,
                        line=number,
                        column=column + 1,
                    )
                )
                break
    return result


def parse_nccl_log_text(text: str, *, source: str) -> NcclLogParse:
    """Parse the text of one log (see the module docstring for the order parsers are tried)."""
    result = NcclLogParse(source=source)
    tests = NcclTestsReader(source)
    last_died: int | None = None
    for number, raw in enumerate(_lines(text), start=1):
        result.lines += 1
        if not raw.strip():
            result.blank_lines += 1
            continue
        stripped = strip_launcher_prefix(raw)
        if stripped.launcher_rank is not None:
            result.launcher_ranks[number] = stripped.launcher_rank
        line = stripped.text
        at = LineRef(source, number)
        if len(line) > MAX_LINE_CHARS:
            _too_long(result, number, raw)
            continue
        if last_died is not None and STACK_LINE.match(line.lstrip()):
            event = result.watchdog[last_died]
            result.watchdog[last_died] = dataclasses.replace(
                event, stack=(*event.stack, line.strip())
            )
            continue
        last_died = None
        if not _dispatch(line, at, result, tests):
            result.unknown_lines += 1
            if len(result.unknown_samples) < UNKNOWN_SAMPLES:
                result.unknown_samples.append((number, raw[:200]))
            continue
        latest = result.watchdog[-1] if result.watchdog else None
        if latest and latest.line == number and latest.kind is WatchdogKind.THREAD_DIED:
            last_died = len(result.watchdog) - 1
    result.nccl_tests = tests.results
    return result


def _too_long(result: NcclLogParse, number: int, raw: str) -> None:
    result.unknown_lines += 1
    if len(result.unknown_samples) < UNKNOWN_SAMPLES:
        result.unknown_samples.append((number, raw[:200]))
    if not any(w.field == "line length" for w in result.warnings):
        result.warnings.append(
            NcclLogError(
                f"lines longer than {MAX_LINE_CHARS:,} characters are not parsed (binary data?)",
                source=result.source,
                line=number,
                field="line length",
            )
        )


def _lines(text: str) -> list[str]:
    """Lines as editors and ``grep -n`` number them: split on ``\n`` only (a ``\r`` before it
    is dropped), so form feeds, ``\x85`` or U+2028 inside a line do not shift line numbers."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _dispatch(line: str, at: LineRef, result: NcclLogParse, tests: NcclTestsReader) -> bool:
    """Offer the line to each parser; True when one took it."""
    records = parse_nccl_line(line, at)
    if records is not None:
        result.nccl.extend(records)
        return True
    event = parse_watchdog_line(line, at)
    if event is not None:
        result.watchdog.append(event)
        return True
    if tests.feed(line, at):
        return True
    found = parse_straggler_line(line, at)
    if found:
        result.stragglers.extend(found)
        return True
    return False
