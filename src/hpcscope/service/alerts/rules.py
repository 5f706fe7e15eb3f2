"""Rules as data: ``deploy/rules/*.yaml``, loaded and validated at start.

A rule file holds ``rules:``, a list of entries (``id``, ``vector``, ``severity``, ``title``,
``window_steps``, ``min_hits``, ``thresholds``, ``enabled``, and for the event rules ``lists``:
named lists of strings or integers such as allow-lists, path prefixes, CIDRs and ports, and
``falco_rules``: the Falco rule names a rule takes over). Validation is strict (unknown
keys, wrong types, a rule id twice, a rule without the thresholds its evaluator needs), and
every error names the file and the line of the offending entry or key, so a site that edits a
threshold learns at start, not at the first alert.

What an entry must hold comes from the rule registry (:func:`hpcscope.analysis.registry.registry`):
its id must be a rule some evaluator declares, of the declared vector, with the thresholds and
lists that evaluator reads, and list values its check accepts.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from hpcscope.analysis.registry import RULE_ID_PATTERN, RuleRegistry, registry
from hpcscope.model.alerts import RuleSpec, Severity, Vector
from hpcscope.model.errors import SourceError
from hpcscope.service.settings import REPO_ROOT
from hpcscope.service.yaml_lines import compose_and_load, validation_failure
from hpcscope.service.yaml_lines import line_of as _line_of


class RuleFileError(SourceError):
    """A rule file that cannot be used."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=RULE_ID_PATTERN)
    vector: int = Field(ge=1, le=6)
    severity: str
    title: str = Field(min_length=1)
    window_steps: int = Field(1, ge=1)
    min_hits: int = Field(1, ge=1)
    thresholds: dict[str, float] = Field(default_factory=dict)
    enabled: bool = True
    lists: dict[str, list[StrictStr | StrictInt]] = Field(default_factory=dict)
    falco_rules: list[str] = Field(default_factory=list)

    @field_validator("severity")
    @classmethod
    def _severity(cls, value: str) -> str:
        Severity.parse(value)
        return value


class _RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[_Rule]


def bundled_rules_dir() -> Path:
    """The rule files shipped with hpcscope (``deploy/rules`` of the checkout or the wheel)."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "rules",
        REPO_ROOT / "deploy" / "rules",
    ):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("no bundled rules directory")


def load_rule_file(path: Path, *, registered: RuleRegistry | None = None) -> list[RuleSpec]:
    """Load and validate one rule file.

    Args:
        path: the YAML file.
        registered: the rules declared in code (default: the registry): an entry's id must
            be one of them, of its vector, with the thresholds and lists its evaluator reads.

    Raises:
        RuleFileError: unreadable, not YAML, or an invalid entry (file, line, field named).
    """
    declared = registry() if registered is None else registered
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleFileError(f"cannot read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise RuleFileError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source
        ) from None
    node, raw = compose_and_load(text, source=source, error=RuleFileError)
    try:
        parsed = _RuleFile.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise validation_failure(exc, node, source=source, error=RuleFileError) from None
    specs: list[RuleSpec] = []
    seen: set[str] = set()
    for index, rule in enumerate(parsed.rules):
        line = _line_of(node, ["rules", index])
        if rule.id in seen:
            raise RuleFileError(f"rule {rule.id} appears twice", source=source, line=line)
        seen.add(rule.id)
        code = declared.get(rule.id)
        if code is None or not code.in_rule_file:
            why = "is set in code, not in a rule file" if code else "is not a declared rule"
            raise RuleFileError(
                f"rule {rule.id} {why} (declared: {', '.join(declared.ids())})",
                source=source,
                line=line,
                field=f"rules.{index}.id",
            )
        if rule.vector != code.vector:
            raise RuleFileError(
                f"rule {rule.id} is of vector {int(code.vector)} ({code.vector.name.lower()}), "
                f"not {rule.vector}",
                source=source,
                line=_line_of(node, ["rules", index, "vector"]),
                field=f"rules.{index}.vector",
            )
        missing = [name for name in code.thresholds if name not in rule.thresholds]
        if missing:
            raise RuleFileError(
                f"rule {rule.id} needs thresholds {', '.join(missing)}",
                source=source,
                line=_line_of(node, ["rules", index, "thresholds"]),
                field=f"rules.{index}.thresholds",
            )
        missing_lists = [name for name in code.lists if name not in rule.lists]
        if missing_lists:
            raise RuleFileError(
                f"rule {rule.id} needs lists {', '.join(missing_lists)}",
                source=source,
                line=_line_of(node, ["rules", index, "lists"]) or line,
                field=f"rules.{index}.lists",
            )
        if rule.min_hits > rule.window_steps:
            raise RuleFileError(
                f"rule {rule.id}: min_hits {rule.min_hits} > window_steps {rule.window_steps}",
                source=source,
                line=_line_of(node, ["rules", index, "min_hits"]),
                field=f"rules.{index}.min_hits",
            )
        specs.append(
            RuleSpec(
                rule_id=rule.id,
                vector=Vector(rule.vector),
                severity=Severity.parse(rule.severity),
                title=rule.title,
                window_steps=rule.window_steps,
                min_hits=rule.min_hits,
                thresholds=dict(rule.thresholds),
                enabled=rule.enabled,
                source=source,
                line=line,
                lists={k: tuple(str(v) for v in vs) for k, vs in rule.lists.items()},
                falco_rules=tuple(rule.falco_rules),
            )
        )
    return specs


def load_rules(directory: Path, *, registered: RuleRegistry | None = None) -> dict[str, RuleSpec]:
    """Every ``*.yaml`` rule file of ``directory``, by rule id (:func:`load_rule_file`).

    Raises:
        RuleFileError: a bad file, or one rule id defined in two files.
    """
    rules: dict[str, RuleSpec] = {}
    for path in sorted(directory.glob("*.yaml")):
        found = load_rule_file(path, registered=registered)
        for spec in found:
            if spec.rule_id in rules:
                other = rules[spec.rule_id]
                raise RuleFileError(
                    f"rule {spec.rule_id} is also defined in {other.source}:{other.line}",
                    source=spec.source,
                    line=spec.line,
                )
            rules[spec.rule_id] = spec
    return rules


def rules_with_datasets(target: Path, datasets: Sequence[str]) -> Path:
    """``target``: a fresh copy of the bundled rules whose dataset registry (DP-1's
    ``datasets``, which DP-2 and DP-4 read too) lists ``datasets`` (``"<root> <owner account>
    <OST targets>"``), as a site that registers its datasets writes it (the demo's)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(bundled_rules_dir(), target)
    path = target / "security-telemetry.yaml"
    empty = "      datasets: []\n"
    text = path.read_text(encoding="utf-8")
    if text.count(empty) != 1:
        raise RuleFileError("no empty DP-1 datasets list to fill", source=str(path))
    path.write_text(text.replace(empty, f"      datasets: {json.dumps(list(datasets))}\n"))
    return target


def load_site_rules(
    directory: Path | None, *, registered: RuleRegistry | None = None
) -> dict[str, RuleSpec]:
    """The site's rules (``directory``, default the bundled ones), checked against what the
    evaluators declare: entries (:func:`load_rule_file`) and list values (each rule's check).

    Raises:
        RuleFileError: a bad rule file (file and line named).
    """
    declared = registry() if registered is None else registered
    rules = load_rules(directory or bundled_rules_dir(), registered=declared)
    for spec, message in declared.list_errors(rules):
        raise RuleFileError(message, source=spec.source, line=spec.line, field="lists")
    return rules
