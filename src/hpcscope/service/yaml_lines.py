"""The line of a YAML node, for errors that name file and line (rule files, kernel classes).

Shared by the capabilities that load site-editable YAML (``service/alerts/rules.py``,
``service/traces/kernel_classes.py``); it imports nothing of hpcscope, so a client command that
loads a table (``hpcscope traces analyze``) does not pull in the settings and their imports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from hpcscope.model import bounded_yaml
from hpcscope.model.errors import SourceError

if TYPE_CHECKING:  # pydantic only for the annotation: a valid file is read without it
    from pydantic import ValidationError

E = TypeVar("E", bound=SourceError)


def compose_and_load(text: str, *, source: str, error: type[E]) -> tuple[yaml.Node | None, Any]:
    """The node tree (for lines) and the data of a YAML text; ``error`` naming the line if the
    text is not YAML."""
    try:
        return bounded_yaml.compose_and_load(text, source=source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise error(
            f"not YAML: {getattr(exc, 'problem', None) or exc}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None


def validation_failure(
    exc: ValidationError, node: yaml.Node | None, *, source: str, error: type[E]
) -> E:
    """pydantic's first error as ``error``, with the line and dotted field it names."""
    first = exc.errors()[0]
    loc = list(first["loc"])
    return error(
        first["msg"],
        source=source,
        line=line_of(node, loc),
        field=".".join(str(p) for p in loc) or None,
    )


def line_of(node: yaml.Node | None, loc: Iterable[int | str]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (as deep as it exists)."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key, value in node.value:
                if key.value == part:
                    found, line = value, key.start_mark.line + 1
                    break
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
        if node is None:
            break
    return line
