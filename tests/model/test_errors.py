"""The exception tree: one root, every class listed in the drawing in ``model/errors.py``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import hpcscope
from hpcscope.model import errors
from hpcscope.model.errors import ConfigError, HpcscopeError, SourceError, TopologyError


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the hpcscope package, by name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(hpcscope.__path__, "hpcscope."):
        if info.name.endswith("__main__"):
            continue  # running it starts the CLI
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[name] = value
    return found


CLASSES = _exception_classes()


def _drawn_tree() -> dict[str, int]:
    """Class name -> depth, from the ``::`` block of the module docstring."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1]
    drawn: dict[str, int] = {}
    for line in block.splitlines():
        match = re.match(r"^(\s*(?:[│ ]\s*)*(?:[├└]── )?)(\w+)", line)
        if match and line.strip():
            drawn[match.group(2)] = len(match.group(1))
    return drawn


def test_the_walk_finds_the_package_exceptions() -> None:
    # guards the walk itself: a walk that found nothing would pass the next test
    assert {"HpcscopeError", "StoreError", "ExpositionError", "UploadError"} <= set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_exception_derives_from_the_root(name: str) -> None:
    assert issubclass(CLASSES[name], HpcscopeError), f"{name} does not derive from HpcscopeError"


def test_the_docstring_draws_every_exception_under_its_parent() -> None:
    drawn = _drawn_tree()
    assert set(drawn) == set(CLASSES), (
        f"missing from the drawing: {sorted(set(CLASSES) - set(drawn))}; "
        f"drawn but not defined: {sorted(set(drawn) - set(CLASSES))}"
    )
    # each drawn child sits under its nearest less-indented ancestor: check against __mro__
    lines = [(name, depth) for name, depth in drawn.items()]
    for index, (name, depth) in enumerate(lines):
        if name == "HpcscopeError":
            continue
        parent = next(n for n, d in reversed(lines[:index]) if d < depth)
        assert issubclass(CLASSES[name], CLASSES[parent]), f"{name} is drawn under {parent}"


def test_config_errors_keep_source_and_position() -> None:
    exc = TopologyError("unknown key", source="site.yaml", line=3, column=5, field="nodes")
    assert isinstance(exc, ConfigError)
    assert isinstance(exc, SourceError)
    assert isinstance(exc, ValueError)  # callers that caught ValueError still do
    assert str(exc) == "site.yaml:3:5: nodes: unknown key"
