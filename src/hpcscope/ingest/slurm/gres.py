"""TRES and GRES strings: GPU counts and GPU indices as Slurm prints them.

``AllocTRES``/``tres_alloc_str`` (``billing=8,cpu=8,gres/gpu=4,gres/gpu:h100=4,mem=64G``), the
JSON TRES lists of ``sacct --json``, and GRES strings of ``sinfo``/``scontrol``/slurmrestd
(``gpu:h100:4(IDX:0-3)``, ``gpu:model_a:2(IDX:0,3)``, ``gpu:model_a:0(IDX:N/A)``,
``gpu:1g.10gb:21(S:1)``, ``(null)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hpcscope.ingest.slurm.common import slurm_int

_TRES_GPU = re.compile(r"^gres/gpu(?::(?P<type>[^=]+))?=(?P<count>\d+)$")


def gpus_from_tres_string(tres: str) -> int | None:
    """GPU count in a TRES string (``AllocTRES``, ``tres_alloc_str``).

    ``gres/gpu=4`` counts 4; typed entries ``gres/gpu:a100=4`` are summed when no untyped total
    is present (Slurm lists both when types are configured: the untyped one is the total).

    Returns:
        The count, 0 when the string names TRES but no GPU, None when the string is empty.
    """
    tres = tres.strip()
    if not tres:
        return None
    total: int | None = None
    typed = 0
    for item in tres.split(","):
        match = _TRES_GPU.match(item.strip())
        if match is None:
            continue
        if match["type"] is None:
            total = int(match["count"])
        else:
            typed += int(match["count"])
    return total if total is not None else typed


def gpus_from_tres_list(entries: Iterable[Mapping[str, Any]]) -> int | None:
    """GPU count in a JSON TRES list (``[{type: gres, name: gpu, count: 4}, ...]``)."""
    total: int | None = None
    typed = 0
    seen = False
    for entry in entries:
        seen = True
        if str(entry.get("type") or "") != "gres":
            continue
        name = str(entry.get("name") or "")
        count = slurm_int(entry.get("count"))
        if count is None or count < 0:
            continue
        if name == "gpu":
            total = count
        elif name.startswith("gpu:"):
            typed += count
    if not seen:
        return None
    return total if total is not None else typed


@dataclass(frozen=True, slots=True)
class GresEntry:
    """One GRES item: ``gpu:h100:4(IDX:0-3)``, ``gpu:1g.10gb:21(S:1)``, ``gpu:0``.

    Attributes:
        name: ``gpu``, ``mps``, ``shard``...
        type: the GRES type (model or MIG profile), or None.
        count: how many.
        indices: the ``IDX:`` list expanded (``0-3,5`` -> 0,1,2,3,5); None when absent or
            ``N/A``.
        sockets: the ``S:`` socket list as written, or None.
    """

    name: str
    type: str | None
    count: int
    indices: tuple[int, ...] | None = None
    sockets: str | None = None

    @property
    def is_mig(self) -> bool:
        """Whether the type is a MIG profile (``1g.10gb``, ``3g.40gb``): indices are MIG
        devices, not physical GPUs."""
        return self.type is not None and _MIG_PROFILE.match(self.type) is not None


_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(?:\+\w+)*$", re.IGNORECASE)
_GRES_ITEM = re.compile(r"^(?P<spec>[^()]+?)(?:\((?P<extra>[^()]*)\))?$")


def expand_index_list(text: str) -> tuple[int, ...]:
    """``"0-3,5"`` -> (0, 1, 2, 3, 5).

    Raises:
        ValueError: not a list of integers and ranges.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"bad index list {text!r}")
        if sep:
            start, stop = int(low), int(high)
            if stop < start or stop - start > 4096:
                raise ValueError(f"bad index range {part!r}")
            out.extend(range(start, stop + 1))
        else:
            out.append(int(low))
    return tuple(out)


def _split_outside_parens(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def parse_gres(text: str) -> list[GresEntry]:
    """Parse a GRES string as ``sinfo``, ``scontrol`` and slurmrestd print it.

    ``(null)``, ``N/A`` and the empty string are no GRES. Each comma-separated item (commas
    inside parentheses belong to the index list) is ``name[:type][:count][(IDX:list|S:list)]``.

    Raises:
        ValueError: an item that is not in that form.
    """
    text = text.strip()
    if text in ("", "(null)", "N/A", "none"):
        return []
    entries: list[GresEntry] = []
    for item in _split_outside_parens(text):
        match = _GRES_ITEM.match(item)
        if match is None:
            raise ValueError(f"bad GRES item {item!r}")
        fields = match["spec"].split(":")
        name = fields[0]
        if not name or not re.fullmatch(r"[A-Za-z0-9_./-]+", name):
            raise ValueError(f"bad GRES name in {item!r}")
        gres_type: str | None = None
        count = 1
        rest = fields[1:]
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        if rest:
            gres_type = ":".join(rest)
        indices: tuple[int, ...] | None = None
        sockets: str | None = None
        extra = match["extra"]
        if extra:
            for clause in _split_clauses(extra):
                key, _, value = clause.partition(":")
                if key == "IDX":
                    indices = None if value in ("N/A", "") else expand_index_list(value)
                elif key == "S":
                    sockets = value
        entries.append(GresEntry(name, gres_type, count, indices, sockets))
    return entries


def _split_clauses(extra: str) -> list[str]:
    """``IDX:0,3`` or ``S:0-1`` (the comma belongs to the list, not a new clause)."""
    clauses: list[str] = []
    for part in extra.split(","):
        if re.match(r"^[A-Z]+:", part) or not clauses:
            clauses.append(part)
        else:
            clauses[-1] += "," + part
    return clauses
