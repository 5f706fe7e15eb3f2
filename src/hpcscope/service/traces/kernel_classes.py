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
pure-Python YAML parser out of its start-up (``docs/benchmarks.md``). The bundled table's
rules, once accepted, are also kept in the user's cache directory (``$XDG_CACHE_HOME`` or
``~/.cache``, ``hpcscope/``) as marshal data together with the file's text: a run whose
bundled file has that same text reads them back without importing PyYAML at all (~20 ms of
a small run's start-up); anything else about the cache (missing, unreadable, another text,
another format) reads the YAML as before.
"""

from __future__ import annotations

import marshal
import os
import re
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcscope.analysis.traces.kernel_classes import (
    DIMENSIONS,
    EVENTS,
    OPS,
    ROLES,
    ClassRule,
    ClassTable,
)
from hpcscope.model import bounded_yaml
from hpcscope.model.errors import SourceError

FILE_SCHEMA = "hpcscope.kernel-classes/1"


class ClassFileError(SourceError):
    """A kernel class file that cannot be used."""


#: The keys of an entry, and those it must have.
_RULE_KEYS = frozenset({"match", "events", "op", "dimension", "role", "library"})
_REQUIRED_KEYS = frozenset({"match", "events", "op", "dimension"})
#: The name of libyaml's loader in PyYAML, used when PyYAML was built with it (the same nodes
#: and values, ~10x faster); None: always the pure-Python loader and the model.
_FAST_LOADER: Any = "CSafeLoader"
#: Version of the cached form of the bundled table (see the module docstring).
_CACHE_FORMAT = "hpcscope.kernel-classes.cache/1"


def _accepted(text: str, source: str) -> tuple[ClassRule, ...] | None:
    """The rules of a valid file, read without pydantic; None when anything is off (the
    slow path then says what)."""
    if _FAST_LOADER is None:
        return None
    import yaml

    from hpcscope.service.yaml_lines import line_of

    loader = getattr(yaml, _FAST_LOADER, None)
    if loader is None:
        return None
    try:
        node = yaml.compose(text, Loader=loader)
        if node is None:
            return None
        bounded_yaml.check_nodes(node, source=source)  # libyaml's graph, bounded as ours
    except (yaml.YAMLError, SourceError, RecursionError):
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
                source=f"{source}:{line_of(node, ['rules', i])}",
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


def _read_text(path: Path) -> str:
    source = str(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClassFileError(f"cannot read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise ClassFileError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source
        ) from None


def load_class_file(path: Path, text: str | None = None) -> tuple[ClassRule, ...]:
    """Load and validate one class file (``text``: its content, when already read).

    Raises:
        ClassFileError: unreadable, not YAML, or an invalid entry (file, line, field named).
    """
    source = str(path)
    text = _read_text(path) if text is None else text
    fast = _accepted(text, source)
    if fast is not None:
        return fast
    from pydantic import ValidationError

    from hpcscope.service.traces.class_file_model import ClassFile
    from hpcscope.service.yaml_lines import compose_and_load, line_of, validation_failure

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
            source=f"{source}:{line_of(node, ['rules', i])}",
        )
        for i, r in enumerate(parsed.rules)
    )


def load_class_table(site_files: Iterable[Path] = ()) -> ClassTable:
    """The site's files first (their rules win), then the bundled table.

    Raises:
        ClassFileError: a file that cannot be used.
    """
    rules: list[ClassRule] = []
    for path in site_files:
        rules.extend(load_class_file(Path(path)))
    rules.extend(_bundled_rules(bundled_classes_file()))
    return ClassTable(tuple(rules))


def _cache_file(source: str, text: str) -> Path | None:
    """Where the cached rules of this file and text would be; None without a home."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home directory to expand
        return None
    key = zlib.crc32(f"{source}\0{text}".encode())  # the text itself is compared on load
    return base / "hpcscope" / f"kernel-classes-{key:08x}.marshal"


def _bundled_rules(path: Path) -> tuple[ClassRule, ...]:
    """The bundled file's rules: from the cache when it holds this file's text, else read
    (and cached when the file is accepted as it is)."""
    source, text = str(path), _read_text(path)
    cache = _cache_file(source, text)
    if cache is not None:
        cached = _from_cache(cache, source, text)
        if cached is not None:
            return cached
    rules = _accepted(text, source)
    if rules is None:
        return load_class_file(path, text)
    if cache is not None:
        _to_cache(cache, source, text, rules)
    return rules


_FIELDS = 7


def _from_cache(cache: Path, source: str, text: str) -> tuple[ClassRule, ...] | None:
    try:
        data = cache.read_bytes()
    except OSError:
        return None
    try:
        # written by _to_cache for this user only (their cache directory); any other shape
        # is ignored
        loaded = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    if not (
        type(loaded) is tuple
        and len(loaded) == 4
        and loaded[:3] == (_CACHE_FORMAT, source, text)
        and type(loaded[3]) is tuple
    ):
        return None
    rules = []
    for entry in loaded[3]:
        if not (
            type(entry) is tuple
            and len(entry) == _FIELDS
            and all(type(value) is str for value in entry)
        ):
            return None
        pattern, events, op, dimension, role, library, where = entry
        if events not in EVENTS or op not in OPS or dimension not in DIMENSIONS:
            return None
        if role not in ROLES:
            return None
        rules.append(
            ClassRule(
                pattern=pattern,
                events=events,
                op=op,
                dimension=dimension,
                role=role,
                library=library,
                source=where,
            )
        )
    return tuple(rules)


def _to_cache(cache: Path, source: str, text: str, rules: tuple[ClassRule, ...]) -> None:
    entries = tuple(
        (r.pattern, r.events, r.op, r.dimension, r.role, r.library, r.source) for r in rules
    )
    temporary = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(marshal.dumps((_CACHE_FORMAT, source, text, entries)))
        os.replace(temporary, cache)  # a reader sees the old file or the whole new one
    except OSError:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
