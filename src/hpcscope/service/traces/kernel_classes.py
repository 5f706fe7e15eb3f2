"""Kernel class tables as data: ``deploy/kernels/classes.yaml`` and a site's own files.

A file holds ``schema: hpcscope.kernel-classes/1`` and ``rules:``, a list of entries
(``match``, ``events``, ``op``, ``dimension``, ``role``, ``library``; meaning in
``docs/traces.md``). Validation is strict (unknown keys, an unknown op or dimension, a pattern
that is not a regular expression) and every error names the file and the line of the entry,
as for ``deploy/rules/`` (:mod:`hpcscope.service.alerts.rules`).

A file that is valid loads without pydantic, with libyaml composing it once
(:func:`_accepted`: every check of the pydantic model below, on plain values); anything else is
read again as before, by PyYAML's own loader and the model, whose messages name the problem.
``traces analyze`` loads the bundled table on every run: this keeps pydantic and the
pure-Python YAML parser out of its start-up (``docs/benchmarks.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from hpcscope.analysis.traces.kernel_classes import (
    DIMENSIONS,
    EVENTS,
    OPS,
    ROLES,
    ClassRule,
    ClassTable,
)
from hpcscope.model.errors import SourceError
from hpcscope.service.yaml_lines import compose_and_load, validation_failure
from hpcscope.service.yaml_lines import line_of as _line_of

FILE_SCHEMA = "hpcscope.kernel-classes/1"


class ClassFileError(SourceError):
    """A kernel class file that cannot be used."""


#: The keys of an entry, and those it must have.
_RULE_KEYS = frozenset({"match", "events", "op", "dimension", "role", "library"})
_REQUIRED_KEYS = frozenset({"match", "events", "op", "dimension"})
#: libyaml's loader when PyYAML was built with it (the same nodes and values, ~10x faster).
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", None)


def _accepted(text: str, source: str) -> tuple[ClassRule, ...] | None:
    """The rules of a valid file, read without pydantic; None when anything is off (the
    slow path then says what)."""
    if _FAST_LOADER is None:
        return None
    try:
        node = yaml.compose(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    raw: Any = yaml.SafeLoader("").construct_document(node)
    if type(raw) is not dict or raw.keys() != {"schema", "rules"} or raw["schema"] != FILE_SCHEMA:
        return None
    entries = raw["rules"]
    if type(entries) is not list:
        return None
    rules = []
    for i, entry in enumerate(entries):
        if type(entry) is not dict or not _REQUIRED_KEYS <= entry.keys() <= _RULE_KEYS:
            return None
        values = {"role": "transfer", "library": "", **entry}
        if not all(type(v) is str for v in values.values()):
            return None
        if (
            not values["match"]
            or values["events"] not in EVENTS
            or values["op"] not in OPS
            or values["dimension"] not in DIMENSIONS
            or values["role"] not in ROLES
        ):
            return None
        try:
            re.compile(values["match"])
        except re.error:
            return None
        rules.append(
            ClassRule(
                pattern=values["match"],
                events=values["events"],
                op=values["op"],
                dimension=values["dimension"],
                role=values["role"],
                library=values["library"],
                source=f"{source}:{_line_of(node, ['rules', i])}",
            )
        )
    return tuple(rules)


def bundled_classes_file() -> Path:
    """The class table shipped with hpcscope (``deploy/kernels/classes.yaml``)."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "kernels" / "classes.yaml",
        # a source checkout (not service.settings.REPO_ROOT: the settings import Arrow, and a
        # client command loads this table)
        Path(__file__).resolve().parents[4] / "deploy" / "kernels" / "classes.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("no bundled kernel class table")


def load_class_file(path: Path) -> tuple[ClassRule, ...]:
    """Load and validate one class file.

    Raises:
        ClassFileError: unreadable, not YAML, or an invalid entry (file, line, field named).
    """
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClassFileError(f"cannot read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise ClassFileError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source
        ) from None
    fast = _accepted(text, source)
    if fast is not None:
        return fast
    from pydantic import ValidationError

    from hpcscope.service.traces.class_file_model import ClassFile

    node, raw = compose_and_load(text, source=source, error=ClassFileError)
    try:
        parsed = ClassFile.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise validation_failure(exc, node, source=source, error=ClassFileError) from None
    return tuple(
        ClassRule(
            pattern=r.match,
            events=r.events,
            op=r.op,
            dimension=r.dimension,
            role=r.role,
            library=r.library,
            source=f"{source}:{_line_of(node, ['rules', i])}",
        )
        for i, r in enumerate(parsed.rules)
    )


def load_class_table(site_files: Iterable[Path] = ()) -> ClassTable:
    """The site's files first (their rules win), then the bundled table.

    Raises:
        ClassFileError: a file that cannot be used.
    """
    rules: list[ClassRule] = []
    for path in (*site_files, bundled_classes_file()):
        rules.extend(load_class_file(Path(path)))
    return ClassTable(tuple(rules))
