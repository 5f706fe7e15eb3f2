"""YAML read within bounds: every YAML file hpcscope reads goes through here.

PyYAML's safe loader runs no code, but what a document describes is not bounded: an anchor
may refer to itself (``&a [*a]`` builds a list that holds itself, and a consumer walking it
never ends), aliases may double at each level ("billion laughs": a few hundred bytes that a
consumer walks as 2**30 values), and 100,000 nested brackets overflow its recursive composer
(``RecursionError``, not a ``YAMLError``). :func:`compose` composes with a loader that counts
its nesting as it goes and refuses an alias to an anchor still open (a cycle), then checks the
composed graph against :class:`~hpcscope.model.bounds.ReadBounds` (values as walked, aliases
counted each time) before anything is constructed; the errors are
:class:`~hpcscope.model.bounds.BoundExceeded` naming the file, line and column.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent

from hpcscope.model.bounds import BoundExceeded, Deadline, ReadBounds, check_graph

#: The bounds of a YAML file (a site's topology of 1,024 nodes holds about 30,000 values).
YAML_BOUNDS = ReadBounds(max_objects=1_000_000, max_depth=100)
#: Nodes composed between two deadline checks.
_CHECK_EVERY = 2048


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing deep nesting and alias cycles while it composes."""

    def __init__(self, text: str, *, source: str, bounds: ReadBounds) -> None:
        super().__init__(text)
        self.source = source
        self.bounds = bounds
        self.deadline = Deadline(bounds.max_seconds, source=source)
        self.depth = 0
        self.composed = 0
        self.open_anchors: set[str] = set()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        if isinstance(event, AliasEvent) and event.anchor in self.open_anchors:
            raise BoundExceeded(
                f"alias *{event.anchor} refers to the node it is in (a reference cycle): refused",
                bound="cycle",
                source=self.source,
                line=mark.line + 1,
                column=mark.column + 1,
            )
        self.composed += 1
        if self.composed % _CHECK_EVERY == 0:
            self.deadline.check(f"line {mark.line + 1}")
        anchor = event.anchor if isinstance(event, CollectionStartEvent) else None
        if anchor is not None:
            self.open_anchors.add(anchor)
        self.depth += 1
        if self.depth > self.bounds.max_depth:
            raise BoundExceeded(
                f"nested deeper than {self.bounds.max_depth} levels: refused",
                bound="depth",
                source=self.source,
                line=mark.line + 1,
                column=mark.column + 1,
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            if anchor is not None:
                self.open_anchors.discard(anchor)


def _node_children(node: object) -> Iterable[object] | None:
    if isinstance(node, yaml.SequenceNode):
        return node.value  # type: ignore[no-any-return]
    if isinstance(node, yaml.MappingNode):
        return (part for pair in node.value for part in pair)
    return None


def _line_of(node: object) -> str | None:
    mark = getattr(node, "start_mark", None)
    return f"line {mark.line + 1}" if mark is not None else None


def compose(
    text: str, *, source: str, bounds: ReadBounds = YAML_BOUNDS
) -> tuple[yaml.Node | None, yaml.SafeLoader]:
    """The document's node graph, checked (module docstring), and a loader to construct its
    values with (:func:`construct`).

    libyaml's composer (PyYAML's ``CSafeLoader``, when built with it) composes 4-5 times faster
    than the pure-Python one (a 1 MB flow sequence: 2 s against 15 s) and refuses nesting past
    1,000 levels itself; its graph is checked against ``bounds`` before anything is built. A
    document it refuses, or one with a cycle, is composed again by the pure-Python loader of
    this module, whose errors (PyYAML's messages, the alias of a cycle) name the line.

    Raises:
        BoundExceeded: deeper than ``max_depth``, an alias cycle, more than ``max_objects``
            values as walked, or longer than ``max_seconds``.
        yaml.YAMLError: not YAML (as :func:`yaml.safe_load` raises it).
    """
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            node = yaml.compose(text, Loader=fast)
            if node is not None:
                check_nodes(node, source=source, bounds=bounds)
            return node, yaml.SafeLoader("")
        except BoundExceeded as exc:
            if exc.bound != "cycle":
                raise
        except (yaml.YAMLError, RecursionError):
            pass  # composed again below: the pure-Python loader's error says what and where
    loader = _BoundedLoader(text, source=source, bounds=bounds)
    try:
        node = loader.get_single_node()
    except RecursionError:  # a composer frame deeper than the bound never gets this far
        raise BoundExceeded(
            "nested too deeply to read: refused", bound="depth", source=source
        ) from None
    finally:
        loader.dispose()
    if node is not None:
        check_nodes(node, source=source, bounds=bounds, deadline=loader.deadline)
    return node, loader


def construct(node: yaml.Node | None, loader: yaml.SafeLoader) -> Any:
    """The values of a node graph :func:`compose` checked (``None`` for an empty document)."""
    if node is None:
        return None
    return loader.construct_document(node)


def check_nodes(
    node: yaml.Node,
    *,
    source: str,
    bounds: ReadBounds = YAML_BOUNDS,
    deadline: Deadline | None = None,
) -> None:
    """Check a composed node graph (whichever loader made it) against ``bounds``: values as
    walked (aliases each time), depth and cycles (:func:`~hpcscope.model.bounds.check_graph`).

    Raises:
        BoundExceeded: naming the line of the node where a bound was crossed.
    """
    check_graph(
        node,
        source=source,
        bounds=bounds,
        where=_line_of,
        deadline=deadline,
        children=_node_children,
    )


def safe_load(text: str, *, source: str, bounds: ReadBounds = YAML_BOUNDS) -> Any:
    """:func:`yaml.safe_load` within ``bounds`` (module docstring).

    Raises:
        BoundExceeded: see :func:`compose`.
        yaml.YAMLError: not YAML.
    """
    return construct(*compose(text, source=source, bounds=bounds))


def compose_and_load(
    text: str, *, source: str, bounds: ReadBounds = YAML_BOUNDS
) -> tuple[yaml.Node | None, Any]:
    """The node graph (for line numbers) and the values, from one bounded composition."""
    node, loader = compose(text, source=source, bounds=bounds)
    return node, construct(node, loader)
