"""nccl-tests output (``all_reduce_perf`` and friends) -> typed results.

The layout is decided by the header, never guessed from a row (``training-steps.md`` §8):
the column line says whether a ``root`` column exists (rooted collectives print it, older
releases never did) and whether the error column is ``#wrong`` or the older ``error``. When a
log starts below the column line, the units line decides (its ``(us)`` column sits eight
characters further right when ``root`` is present); only when both are missing does the
number of fields in a row decide. nccl-tests 2.20 adds ``# nccl-tests version`` and
``# Collective test starting:`` lines. Rows of several runs may interleave in one log (sizes
start again): each row joins the run whose last size is the largest one below its own.

Times are stored in seconds, bandwidths in bytes per second (nccl-tests prints µs and GB/s,
1 GB = 1e9 bytes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpcscope.model.nccl import LineRef

NT_VERSION = re.compile(r"^# nccl-tests version (?P<version>\S+)")
NT_COLLECTIVE = re.compile(r"^# Collective test starting: (?P<name>\S+)")
NT_HEADER = re.compile(
    r"^# nThread (?P<nthread>\d+) nGpus (?P<ngpus>\d+) minBytes (?P<minb>\d+) maxBytes "
    r"(?P<maxb>\d+) step: (?P<step>\d+)\((?P<steptype>factor|bytes)\)"
)
NT_ITERS = re.compile(r"warmup iters: (?P<warmup>\d+) iters: (?P<iters>\d+)")
NT_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+) on\s+"
    r"(?P<host>\S+) device\s+(?P<dev>\d+) \[(?P<bus>[^\]]+)\] (?P<model>.+?)\s*$"
)
NT_COLUMNS = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(?P<root>root\s+)?time\s")
NT_UNITS = re.compile(r"^#\s+\(B\)\s+\(elements\)(?P<gap>\s+)\(us\)")
NT_AVG = re.compile(r"^# Avg bus bandwidth\s*: (?P<avg>(?:\d+(?:\.\d*)?|\.\d+))")
NT_OOB = re.compile(r"^# Out of bounds values\s*: (?P<value>\d+)")
NT_KNOWN_COMMENT = re.compile(r"^#(?:\s*$|\s+Using devices|\s+out-of-place|.*\(us\))")
NT_ROW = re.compile(r"^\s*\d+\s+\d+\s+\w+\s+\w+\s+")
#: Gap between ``(elements)`` and ``(us)`` on the units line: 23 spaces without a root column,
#: 31 with one (nccl-tests' fixed-width format).
_ROOT_GAP_THRESHOLD = 27
_US = 1e-6
_GB = 1e9


@dataclass(frozen=True, slots=True)
class NcclTestsDevice:
    """``#  Rank  0 Group  0 Pid   6899 on host device  0 [0000:04:00] NVIDIA H100 80GB HBM3``."""

    at: LineRef
    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str
    model: str


@dataclass(frozen=True, slots=True)
class NcclTestsMeasure:
    """One half of a row: out-of-place or in-place."""

    time_seconds: float
    algbw_bytes_per_second: float
    busbw_bytes_per_second: float
    wrong: str


@dataclass(frozen=True, slots=True)
class NcclTestsRow:
    """One message size. ``in_place`` is None when the row stops after the first half."""

    at: LineRef
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: NcclTestsMeasure
    in_place: NcclTestsMeasure | None
    run: int


@dataclass(slots=True)
class NcclTestsResult:
    """One nccl-tests invocation as printed (header, devices, rows, summary).

    ``layout`` says what decided the columns: ``header``, ``units`` or ``row_shape``.
    ``runs`` is the number of interleaved size sweeps found in the rows.
    """

    source: str
    first_line: int
    version: str | None = None
    collective: str | None = None
    nthread: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    has_root: bool | None = None
    error_column: str | None = None
    layout: str | None = None
    devices: list[NcclTestsDevice] = field(default_factory=list)
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw_bytes_per_second: float | None = None
    out_of_bounds: int | None = None
    runs: int = 0
    _run_last_sizes: list[int] = field(default_factory=list)

    def assign_run(self, size: int) -> int:
        """The interleaved run a row of ``size`` bytes belongs to (a new one if none fits)."""
        best: int | None = None
        for index, last in enumerate(self._run_last_sizes):
            if last < size and (best is None or last > self._run_last_sizes[best]):
                best = index
        if best is None:
            self._run_last_sizes.append(size)
            self.runs = len(self._run_last_sizes)
            return self.runs - 1
        self._run_last_sizes[best] = size
        return best


class NcclTestsReader:
    """Feeds lines of one file; collects every nccl-tests result found in it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.results: list[NcclTestsResult] = []
        self._current: NcclTestsResult | None = None

    def feed(self, text: str, at: LineRef) -> bool:
        """Consume ``text`` if it is nccl-tests output; False when it is not."""
        if m := NT_VERSION.match(text):
            self._new(at).version = m["version"]
            return True
        if m := NT_COLLECTIVE.match(text):
            self._block(at).collective = m["name"]
            return True
        if m := NT_HEADER.match(text):
            result = self._block(at) if self._fresh() else self._new(at)
            result.nthread, result.ngpus = int(m["nthread"]), int(m["ngpus"])
            result.min_bytes, result.max_bytes = int(m["minb"]), int(m["maxb"])
            result.step = f"{m['step']}({m['steptype']})"
            if iters := NT_ITERS.search(text):
                result.warmup_iters, result.iters = int(iters["warmup"]), int(iters["iters"])
            return True
        if m := NT_DEVICE.match(text):
            self._block(at).devices.append(
                NcclTestsDevice(
                    at,
                    rank=int(m["rank"]),
                    group=int(m["group"]) if m["group"] else None,
                    pid=int(m["pid"]),
                    host=m["host"],
                    device=int(m["dev"]),
                    bus_id=m["bus"],
                    model=m["model"],
                )
            )
            return True
        if m := NT_COLUMNS.match(text):
            result = self._block(at)
            result.has_root = m["root"] is not None
            result.error_column = "#wrong" if "#wrong" in text else "error"
            result.layout = "header"
            return True
        if m := NT_UNITS.match(text):
            result = self._block(at)
            if result.has_root is None:
                result.has_root = len(m["gap"]) > _ROOT_GAP_THRESHOLD
                result.layout = "units"
            return True
        if m := NT_AVG.match(text):
            self._block(at).avg_busbw_bytes_per_second = float(m["avg"]) * _GB
            return True
        if m := NT_OOB.match(text):
            self._block(at).out_of_bounds = int(m["value"])
            return True
        if self._current is not None and NT_KNOWN_COMMENT.match(text):
            return True
        if self._current is not None and NT_ROW.match(text):
            return self._row(text, at)
        return False

    def _fresh(self) -> bool:
        current = self._current
        return current is not None and not current.rows and current.nthread is None

    def _new(self, at: LineRef) -> NcclTestsResult:
        self._current = NcclTestsResult(source=self.source, first_line=at.line)
        self.results.append(self._current)
        return self._current

    def _block(self, at: LineRef) -> NcclTestsResult:
        return self._current if self._current is not None else self._new(at)

    def _row(self, text: str, at: LineRef) -> bool:
        result = self._block(at)
        parts = text.split()
        has_root = result.has_root
        if has_root is None:
            if len(parts) not in (8, 9, 12, 13):
                return False
            has_root = len(parts) in (9, 13)
            result.has_root, result.layout = has_root, "row_shape"
        head = 5 if has_root else 4
        if len(parts) not in (head + 4, head + 8):
            return False
        try:
            size, count = int(parts[0]), int(parts[1])
            root = int(parts[4]) if has_root else None
            oop = _measure(parts[head : head + 4])
            ip = _measure(parts[head + 4 : head + 8]) if len(parts) == head + 8 else None
        except ValueError:
            return False
        result.rows.append(
            NcclTestsRow(
                at,
                size_bytes=size,
                count=count,
                dtype=parts[2],
                redop=parts[3],
                root=root,
                out_of_place=oop,
                in_place=ip,
                run=result.assign_run(size),
            )
        )
        return True


def _measure(cells: list[str]) -> NcclTestsMeasure:
    return NcclTestsMeasure(
        time_seconds=float(cells[0]) * _US,
        algbw_bytes_per_second=float(cells[1]) * _GB,
        busbw_bytes_per_second=float(cells[2]) * _GB,
        wrong=cells[3],
    )
