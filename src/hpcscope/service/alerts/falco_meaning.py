"""The Falco meaning table read from ``falco/meaning.yaml`` of the rules directory.

The site's rules directory (``rules_dir``) may carry its own ``falco/meaning.yaml``; without
one the bundled table (``deploy/rules/falco/meaning.yaml``) is read. Validation is strict and
every error names the file and line (:class:`~hpcscope.service.alerts.rules.RuleFileError`):
an unknown vector, severity, raise or benign case, a rule listed twice.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpcscope.analysis.alerts.falco_meaning import (
    BENIGN,
    RAISES,
    FalcoMeaning,
    FalcoRuleMeaning,
)
from hpcscope.model.alerts import VECTOR_NAMES, Severity, Vector
from hpcscope.model.bounds import read_text
from hpcscope.service.alerts.rules import RuleFileError, bundled_rules_dir
from hpcscope.service.yaml_lines import compose_and_load, line_of, validation_failure

MEANING_FILE = Path("falco") / "meaning.yaml"
_VECTORS = {name: vector for vector, name in VECTOR_NAMES.items()}


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    falco: str = Field(min_length=1)
    maturity: str | None = None
    priority: str | None = None
    mitre: list[str] = Field(default_factory=list)
    enabled_by_default: bool = True
    vector: str
    severity: str | None = None
    rule: str | None = Field(None, pattern=r"^[A-Z]{1,4}-[A-Z0-9]{1,6}[a-z]?$")
    raise_: list[str] = Field(default_factory=list, alias="raise")
    benign: list[str] = Field(default_factory=list)
    why: str = Field(min_length=1)


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repository: str
    commit: str


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: _Source
    priorities: dict[str, str]
    tactics: dict[str, str]
    default_vector: str
    rules: list[_Entry]


def meaning_path(rules_dir: Path | None) -> Path:
    """The table a site reads: its rules directory's, else the bundled one."""
    if rules_dir is not None and (rules_dir / MEANING_FILE).is_file():
        return rules_dir / MEANING_FILE
    return bundled_rules_dir() / MEANING_FILE


def _vector(name: str, *, source: str, line: int | None) -> Vector:
    vector = _VECTORS.get(name)
    if vector is None:
        names = ", ".join(sorted(_VECTORS))
        raise RuleFileError(f"unknown vector {name!r} (one of {names})", source=source, line=line)
    return vector


def _severity(name: str, *, source: str, line: int | None) -> Severity:
    try:
        return Severity.parse(name)
    except ValueError as exc:
        raise RuleFileError(str(exc), source=source, line=line) from None


def load_falco_meaning(path: Path) -> FalcoMeaning:
    """Read and check a meaning table.

    Raises:
        RuleFileError: unreadable, not YAML, or an invalid entry (file and line named).
    """
    source = str(path)
    text = read_text(path, error=RuleFileError)
    node, raw = compose_and_load(text, source=source, error=RuleFileError)
    try:
        table = _Table.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise validation_failure(exc, node, source=source, error=RuleFileError) from None
    priorities = {
        name.lower(): _severity(value, source=source, line=line_of(node, ["priorities", name]))
        for name, value in table.priorities.items()
    }
    tactics = {
        tag: _vector(value, source=source, line=line_of(node, ["tactics", tag]))
        for tag, value in table.tactics.items()
    }
    rules: dict[str, FalcoRuleMeaning] = {}
    for index, entry in enumerate(table.rules):
        line = line_of(node, ["rules", index])
        if entry.falco in rules:
            raise RuleFileError(
                f"Falco rule {entry.falco!r} listed twice", source=source, line=line
            )
        unknown = [r for r in entry.raise_ if r not in RAISES] + [
            b for b in entry.benign if b not in BENIGN
        ]
        if unknown:
            raise RuleFileError(
                f"unknown raise or benign case {unknown[0]!r} (raises: {', '.join(RAISES)}; "
                f"benign: {', '.join(BENIGN)})",
                source=source,
                line=line,
            )
        if entry.vector == "none":
            rules[entry.falco] = FalcoRuleMeaning(entry.falco, None, Severity.LOW, why=entry.why)
            continue
        if entry.severity is None:
            raise RuleFileError(
                f"Falco rule {entry.falco!r} has a vector but no severity", source=source, line=line
            )
        rules[entry.falco] = FalcoRuleMeaning(
            falco=entry.falco,
            vector=_vector(entry.vector, source=source, line=line),
            severity=_severity(entry.severity, source=source, line=line),
            rule=entry.rule,
            raises=tuple(entry.raise_),
            benign=tuple(entry.benign),
            why=entry.why,
        )
    default = _vector(table.default_vector, source=source, line=line_of(node, ["default_vector"]))
    return FalcoMeaning(rules, priorities, tactics, default)
