"""The rule registry: every ``RULES`` tuple declared in ``hpcscope.analysis``, collected once.

A rule is declared beside its evaluator (:class:`~hpcscope.model.rules.Rule` in the module's
``RULES``); nothing else lists rule ids. :func:`registry` imports every module of
``hpcscope.analysis`` (pure modules: importing them has no effect beyond definitions) and
collects their declarations, in module-name order, then declaration order. It runs on first
use, never at import, so an evaluator module may call it from its engine without a cycle.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from hpcscope.model.rules import RULE_ID_PATTERN, Rule, RuleKind, RuleRegistry

__all__ = ["RULE_ID_PATTERN", "Rule", "RuleKind", "RuleRegistry", "declared_in", "registry"]

#: The packages searched for ``RULES`` (the pure layer: evaluators live nowhere else).
RULE_PACKAGE = "hpcscope.analysis"


def declared_in(package: str) -> list[tuple[str, tuple[Rule, ...]]]:
    """(module, its ``RULES``) for every module of ``package`` that declares rules.

    Raises:
        TypeError: a module whose ``RULES`` is not a tuple of :class:`Rule`.
    """
    root = importlib.import_module(package)
    found: list[tuple[str, tuple[Rule, ...]]] = []
    names = sorted(m.name for m in pkgutil.walk_packages(root.__path__, f"{package}."))
    for name in [package, *names]:
        declared = getattr(importlib.import_module(name), "RULES", None)
        if declared is None:
            continue
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
