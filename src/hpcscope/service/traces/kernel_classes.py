"""Kernel class tables as data: ``deploy/kernels/classes.yaml`` and a site's own files.

A file holds ``schema: hpcscope.kernel-classes/1`` and ``rules:``, a list of entries
(``match``, ``events``, ``op``, ``dimension``, ``role``, ``library``; meaning in
``docs/traces.md``). Validation is strict (unknown keys, an unknown op or dimension, a pattern
that is not a regular expression) and every error names the file and the line of the entry,
as for ``deploy/rules/`` (:mod:`hpcscope.service.alerts.rules`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hpcscope.analysis.traces.kernel_classes import ClassRule, ClassTable
from hpcscope.model.errors import SourceError
from hpcscope.service.yaml_lines import line_of as _line_of

FILE_SCHEMA = "hpcscope.kernel-classes/1"


class ClassFileError(SourceError):
    """A kernel class file that cannot be used."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str = Field(min_length=1)
    events: Literal["gpu", "cpu"]
    op: Literal[
        "all_reduce",
        "reduce_scatter",
        "all_gather",
        "all_to_all",
        "send",
        "recv",
        "send_recv",
        "broadcast",
        "reduce",
        "barrier",
        "collective",
        "peer_copy",
        "compute",
    ]
    dimension: Literal["dp", "tp", "ep", "pp", "none"]
    role: Literal["transfer", "launch"] = "transfer"
    library: str = ""

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: Literal["hpcscope.kernel-classes/1"] = Field(alias="schema")
    rules: list[_Rule]


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
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ClassFileError(
            f"not YAML: {getattr(exc, 'problem', None) or exc}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    try:
        parsed = _File.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = list(first["loc"])
        raise ClassFileError(
            first["msg"],
            source=source,
            line=_line_of(node, loc),
            field=".".join(str(p) for p in loc) or None,
        ) from None
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
