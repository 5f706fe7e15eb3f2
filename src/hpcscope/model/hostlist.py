"""Slurm hostlist expressions: ``gpu[01-02]``, ``rack[1-2]n[01-04]``, ``a,b[3,5-6]``.

Slurm prints node sets in this compressed form everywhere (``NodeList``, ``sacct``, prolog
environment). The expansion keeps zero padding, as Slurm does.
"""

from __future__ import annotations

import re

from hpcscope.model.errors import HpcscopeError

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(HpcscopeError, ValueError):
    """A hostlist expression that Slurm would not accept."""


def _split_top_level(expression: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in expression:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expression!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expression!r}")
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _expand_range_list(body: str, expression: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        if "-" in item:
            low, _, high = item.partition("-")
            if not (low.isdigit() and high.isdigit()):
                raise HostlistError(f"bad range {item!r} in hostlist {expression!r}")
            width = len(low)
            start, stop = int(low), int(high)
            if stop < start:
                raise HostlistError(f"descending range {item!r} in hostlist {expression!r}")
            if stop - start > 1_000_000:
                raise HostlistError(f"range {item!r} too large in hostlist {expression!r}")
            values.extend(str(n).zfill(width) for n in range(start, stop + 1))
        elif item.isdigit():
            values.append(item)
        else:
            raise HostlistError(f"bad item {item!r} in hostlist {expression!r}")
    return values


def _expand_one(pattern: str, expression: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise HostlistError(f"unbalanced brackets in hostlist {expression!r}")
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [
        head + value + rest
        for value in _expand_range_list(match.group(1), expression)
        for rest in _expand_one(tail, expression)
    ]


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order.

    Args:
        expression: e.g. ``"gpu[01-03,07],login1"``. ``"(null)"``, ``"None assigned"`` and
            the empty string expand to no hosts.

    Returns:
        The host names, duplicates kept in the order written.

    Raises:
        HostlistError: unbalanced brackets or a malformed range.
    """
    expression = expression.strip()
    if expression in ("", "(null)", "None assigned", "None"):
        return []
    hosts: list[str] = []
    for part in _split_top_level(expression):
        hosts.extend(_expand_one(part, expression))
    return hosts
