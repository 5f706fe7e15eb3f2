"""The line of a YAML node, for errors that name file and line (rule files, kernel classes).

Shared by the capabilities that load site-editable YAML (``service/alerts/rules.py``,
``service/traces/kernel_classes.py``); it imports nothing of hpcscope, so a client command that
loads a table (``hpcscope traces analyze``) does not pull in the settings and their imports.
"""

from __future__ import annotations

from collections.abc import Iterable

import yaml


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
