"""The rule registry: every ``RULES`` tuple declared in ``hpcscope.analysis``, collected once.

A rule is declared beside its evaluator (:class:`~hpcscope.model.rules.Rule` in the module's
``RULES``); nothing else lists rule ids. :func:`registry` imports every module of
``hpcscope.analysis`` whose source assigns ``RULES`` at module level (pure modules: importing
them has no effect beyond definitions) and collects their declarations, in module-name order,
then declaration order. It runs on first use, never at import, so an evaluator module may call
it from its engine without a cycle.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

from hpcscope.model.rules import RULE_ID_PATTERN, Rule, RuleKind, RuleRegistry

__all__ = ["RULE_ID_PATTERN", "Rule", "RuleKind", "RuleRegistry", "declared_in", "registry"]

#: The packages searched for ``RULES`` (the pure layer: evaluators live nowhere else).
RULE_PACKAGE = "hpcscope.analysis"
_DECLARATION = re.compile(r"^RULES\b", re.MULTILINE)


def _declares(name: str) -> bool:
    """Whether the module's source assigns a module-level ``RULES`` (read, not imported: only
    the modules that declare rules are imported)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    return _DECLARATION.search(Path(spec.origin).read_text(encoding="utf-8")) is not None


def declared_in(package: str) -> list[tuple[str, tuple[Rule, ...]]]:
    """(module, its ``RULES``) for every module of ``package`` that declares rules.

    Raises:
        TypeError: a module whose ``RULES`` is not a tuple of :class:`Rule`.
    """
    root = importlib.import_module(package)
    found: list[tuple[str, tuple[Rule, ...]]] = []
    names = sorted(m.name for m in pkgutil.walk_packages(root.__path__, f"{package}."))
    for name in [package, *names]:
        if not _declares(name):
            continue
        declared = getattr(importlib.import_module(name), "RULES", None)
        if not isinstance(declared, tuple) or not all(isinstance(r, Rule) for r in declared):
            raise TypeError(f"{name}.RULES must be a tuple of hpcscope.model.rules.Rule")
        found.append((name, declared))
    return found


@functools.cache
def registry() -> RuleRegistry:
    """Every declared rule (module docstring).

    Raises:
        ValueError: one rule id declared twice.
        TypeError: a ``RULES`` that is not a tuple of rules.
    """
    return RuleRegistry(tuple(r for _, rules in declared_in(RULE_PACKAGE) for r in rules))
