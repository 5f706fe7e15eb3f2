"""Launcher prefixes in front of a training job's log lines, and how to take them off.

Launchers and log collectors prepend their own text to every line a rank writes:

- ``srun -l`` / ``torchrun --tee``: ``0: `` (the task or rank number);
- Open MPI ``--tag-output``: ``[1,0]<stdout>:`` (job id, rank);
- some wrappers: ``[80746] `` (the writing process id);
- log collectors: a timestamp, ``2025-02-18 12:54 ``, ``[2026-02-02 12:15:56] ``, ISO 8601.

Several can be stacked (``1000: [2026-02-02 12:15:56] host:pid:tid [0] NCCL WARN ...``).
PyTorch's own ``[rankN]:`` prefix is *not* a launcher prefix: it names the global rank and
is read by :mod:`hpcscope.ingest.nccl.pytorch_watchdog`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TASK = re.compile(r"^\s*(\d+):\s")
_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?")
_PID = re.compile(r"^\[\d+\]\s")
_TIMESTAMP = re.compile(
    r"^\s*\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?\]?\s"
)
_MAX_PREFIXES = 8


@dataclass(frozen=True, slots=True)
class Stripped:
    """A line without its launcher prefixes.

    Attributes:
        text: what the rank wrote.
        launcher_rank: the rank or task number a ``N: `` or ``[job,N]<stdout>:`` prefix gave.
        prefix_length: characters removed from the start of the line (the column where
            ``text`` starts is ``prefix_length + 1``).
    """

    text: str
    launcher_rank: int | None
    prefix_length: int


def strip_launcher_prefix(line: str) -> Stripped:
    """Remove every launcher prefix at the start of ``line`` (any order, stacked).

    >>> strip_launcher_prefix("0: [2024-03-14 23:07:56] NCCL WARN x").text
    'NCCL WARN x'
    """
    rest = line
    launcher_rank: int | None = None
    for _ in range(_MAX_PREFIXES):
        match = _TASK.match(rest) or _MPI_TAG.match(rest)
        if match is not None:
            if launcher_rank is None:
                launcher_rank = int(match.group(1))
            rest = rest[match.end() :]
            continue
        match = _PID.match(rest) or _TIMESTAMP.match(rest)
        if match is not None:
            rest = rest[match.end() :]
            continue
        break
    return Stripped(text=rest, launcher_rank=launcher_rank, prefix_length=len(line) - len(rest))
